"""Near-duplicate results merged into one, the best-ranked copy kept with the others' URLs.

Beyond the canonical-URL twins `canonical.dedup` drops, two results are one when they have
the same title on one site (www. ignored: a page reachable under two paths), or the same
title and the same snippet on different sites (a mirror). Titles too short to tell pages
apart ("Home", "Login") never merge anything. The merged copies' URLs are kept on the
surviving result as `also_at`, best rank first, so no source is lost. Pure.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import replace

from gateway.search.canonical import SearchResult

MAX_ALSO_AT = 5
# A title shorter than this (in letters and digits, once normalised) is too generic to merge on.
MIN_TITLE_CHARS = 12
MIN_SNIPPET_CHARS = 24
_NON_WORD = re.compile(r"[\W_]+")


def merge_near_duplicates(results: Iterable[SearchResult]) -> tuple[list[SearchResult], int]:
    """The results with near-duplicates folded into their best-ranked copy, in rank order,
    and how many results were folded away."""
    kept: list[SearchResult] = []
    by_key: dict[tuple[str, ...], int] = {}
    merged = 0
    for result in results:
        keys = duplicate_keys(result)
        index = next((by_key[key] for key in keys if key in by_key), None)
        if index is None:
            for key in keys:
                by_key[key] = len(kept)
            kept.append(result)
            continue
        merged += 1
        kept[index] = with_also_at(kept[index], (result.url, *result.also_at))
        for key in keys:
            by_key.setdefault(key, index)
    return kept, merged


def duplicate_keys(result: SearchResult) -> tuple[tuple[str, ...], ...]:
    """The keys under which another result counts as the same page."""
    title = normalise(result.title)
    if len(title.replace(" ", "")) < MIN_TITLE_CHARS:
        return ()
    keys: list[tuple[str, ...]] = [("site", site_of(result.domain), title)]
    snippet = normalise(result.snippet)
    if len(snippet.replace(" ", "")) >= MIN_SNIPPET_CHARS:
        keys.append(("mirror", title, snippet))
    return tuple(keys)


def with_also_at(result: SearchResult, urls: Sequence[str]) -> SearchResult:
    """`result` with `urls` added to its also_at (never its own URL, never twice, capped)."""
    also_at = list(result.also_at)
    for url in urls:
        if url != result.url and url not in also_at and len(also_at) < MAX_ALSO_AT:
            also_at.append(url)
    if len(also_at) == len(result.also_at):
        return result
    return replace(result, also_at=tuple(also_at))


def normalise(text: str) -> str:
    """Case-folded letters and digits, separated by single spaces."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _NON_WORD.sub(" ", folded).strip()


def site_of(host: str) -> str:
    return host[4:] if host.startswith("www.") else host
