"""Near-duplicate results merged into one, the best-ranked copy kept with the others' URLs.

Beyond the canonical-URL twins `canonical.dedup` drops, two results are one page when
- they are on one registrable domain (`docs.example.org` and `www.example.org`; a private
  suffix such as github.io keeps its users apart) and their normalised titles match
  closely: token Jaccard similarity of at least 0.9 (a page reachable under two paths, a
  print view, a tracking variant); or
- on any hosts, their titles match closely once a trailing site name is dropped
  ("… | AP News", "… - The Seattle Times") and their snippets agree: at least 90 % of the
  shorter snippet's tokens are in the other (a mirror, a syndicated copy; providers cut
  snippets at different lengths).
Tokens are case-folded words and digits, and two-character runs of Chinese, Japanese or
Korean script. Titles too short to tell pages apart ("Home", "Login") never merge anything,
nor do snippets of fewer than 8 tokens. The merged copies' URLs stay on the surviving
result as `also_at`, best rank first, so no source is lost. Pure (the public-suffix list is
tldextract's bundled snapshot, never fetched).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gateway.search.canonical import SearchResult

MAX_ALSO_AT = 5
# A title shorter than this (in letters and digits, once normalised) is too generic to merge on.
MIN_TITLE_CHARS = 12
MIN_SNIPPET_TOKENS = 8
TITLE_JACCARD = 0.9
SNIPPET_OVERLAP = 0.9
_NON_WORD = re.compile(r"[\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
# What sits between an article's title and the site's name in a page title.
_SITE_SEPARATOR = re.compile(r"\s+[|\-–—·:]{1,2}\s+|\s*[|｜_]\s*")


@dataclass(frozen=True, slots=True)
class Signature:
    """What one result is compared by, computed once."""

    site: str  # the registrable domain
    title: frozenset[str]  # tokens of the whole title; empty when too short to merge on
    core: frozenset[str]  # tokens of the title without a trailing site name
    snippet: frozenset[str]  # empty when too short to compare


def merge_near_duplicates(results: Iterable[SearchResult]) -> tuple[list[SearchResult], int]:
    """The results with near-duplicates folded into their best-ranked copy, in rank order,
    and how many results were folded away."""
    kept: list[SearchResult] = []
    signatures: list[Signature] = []
    merged = 0
    for result in results:
        signature = signature_of(result)
        index = next(
            (i for i, other in enumerate(signatures) if same_page(signature, other)), None
        )
        if index is None:
            kept.append(result)
            signatures.append(signature)
            continue
        merged += 1
        kept[index] = with_also_at(kept[index], (result.url, *result.also_at))
    return kept, merged


def signature_of(result: SearchResult) -> Signature:
    title = result.title
    whole = tokens(title) if _long_enough(title) else frozenset()
    parts = _SITE_SEPARATOR.split(title.strip())
    core_text = " ".join(parts[:-1]) if len(parts) > 1 else title
    core = tokens(core_text) if _long_enough(core_text) else whole
    snippet = tokens(result.snippet)
    return Signature(
        site=registrable_domain(result.domain),
        title=whole,
        core=core,
        snippet=snippet if len(snippet) >= MIN_SNIPPET_TOKENS else frozenset(),
    )


def same_page(a: Signature, b: Signature) -> bool:
    if a.site and a.site == b.site and a.title and jaccard(a.title, b.title) >= TITLE_JACCARD:
        return True
    if not (a.core and b.core and a.snippet and b.snippet):
        return False
    # One copy may carry a site name the other has not: the titles with and without it.
    titles = max(
        jaccard(x, y) for x in (a.core, a.title) for y in (b.core, b.title) if x and y
    )
    return titles >= TITLE_JACCARD and overlap(a.snippet, b.snippet) >= SNIPPET_OVERLAP


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of the smaller set's tokens that are in the other (a cut snippet matches
    the longer one it was cut from)."""
    return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def tokens(text: str) -> frozenset[str]:
    """Case-folded words and digits; a run of CJK script as its two-character pieces."""
    found: set[str] = set()
    for word in normalise(text).split():
        if _CJK.search(word):
            for run in _CJK.findall(word):
                found.update(run[i : i + 2] for i in range(max(len(run) - 1, 1)))
            found.update(w for w in _CJK.split(word) if w)
        else:
            found.add(word)
    return frozenset(found)


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


@functools.lru_cache(maxsize=4096)
def registrable_domain(host: str) -> str:
    """The registrable domain of a host (`example.co.uk` of `www.example.co.uk`); an IP
    literal or a bare suffix is itself."""
    result = _suffix_extractor()(host)
    if not result.domain or not result.suffix:
        return host
    return f"{result.domain}.{result.suffix}"


def _long_enough(title: str) -> bool:
    return len(normalise(title).replace(" ", "")) >= MIN_TITLE_CHARS


@functools.lru_cache(maxsize=1)
def _suffix_extractor():  # type: ignore[no-untyped-def]
    import tldextract

    # suffix_list_urls=() keeps tldextract on its bundled snapshot: never a download.
    return tldextract.TLDExtract(
        suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True
    )
