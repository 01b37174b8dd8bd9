"""What the model-native providers (openai, anthropic) share: the prompt, and reading the
model's citations into results.

A model that searches answers in prose and cites what it read. Its results are the cited
sources, in the order first cited (when it cited nothing, the sources its searches
returned); its prose is the `answer`, which the tools above wrap as untrusted. Neither API
has a time filter, so a freshness or date range is asked for in the prompt and never claimed
as applied; domain filters go into each API's own fields and are applied again to the
results by the chain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.search.providers.decoding import MAX_PARSED_RESULTS, raw_result
from gateway.search.query import RawResult, SearchQuery

MAX_ANSWER_CHARS = 20_000
_FRESHNESS_WORDS = {"day": "the last day", "week": "the last week", "month": "the last month",
                    "year": "the last year"}  # fmt: skip


def prompt(query: SearchQuery) -> str:
    """The instruction sent with the query: search, cite, stay within the filters."""
    lines = [
        "Search the web for the query below and answer it briefly, citing the pages you "
        "used. Prefer primary sources.",
        f"Query: {query.query}",
    ]
    if query.time_range is not None:
        start, end = query.time_range
        lines.append(f"Use only pages published from {start.isoformat()} to {end.isoformat()}.")
    elif query.freshness is not None:
        lines.append(f"Use only pages published in {_FRESHNESS_WORDS[str(query.freshness)]}.")
    if query.exclude_domains:
        lines.append("Do not use pages from: " + ", ".join(query.exclude_domains) + ".")
    return "\n".join(lines)


def no_time_filter(query: SearchQuery) -> bool:
    return False


def cited_results(
    citations: Iterable[Mapping[str, Any]], sources: Iterable[Mapping[str, Any]]
) -> list[RawResult]:
    """Results from citations ({url, title, snippet}) in order, each URL once, or from the
    sources searched when nothing was cited; the first entry of a URL with a title or snippet
    fills in what another left empty."""
    chosen = list(citations) or list(sources)
    order: list[str] = []
    merged: dict[str, dict[str, Any]] = {}
    for entry in chosen:
        url = entry.get("url")
        if not isinstance(url, str):
            continue
        if url not in merged:
            if len(order) >= MAX_PARSED_RESULTS:
                continue
            order.append(url)
            merged[url] = dict(entry)
            continue
        kept = merged[url]
        for key in ("title", "snippet", "published"):
            if not kept.get(key) and entry.get(key):
                kept[key] = entry[key]
    results = []
    for url in order:
        entry = merged[url]
        found = raw_result(entry.get("title"), url, entry.get("snippet"), entry.get("published"))
        if found is not None:
            results.append(found)
    return results


def capped_answer(parts: Iterable[str]) -> str | None:
    text = "".join(parts).strip()
    return text[:MAX_ANSWER_CHARS] or None
