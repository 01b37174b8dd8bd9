"""DuckDuckGo's keyless HTML endpoint (the default provider).

A bot-challenge ("anomaly") page, usually HTTP 202, is `[rate_limited]` and never "no results".
Result links may be wrapped as //duckduckgo.com/l/?uddg=<target>; ads are dropped.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderAdapter, endpoint
from gateway.search.providers.decoding import (
    HTML_USER_AGENT,
    MAX_PARSED_RESULTS,
    failure_for_status,
    load_html,
    node_text,
    query_with_site_operators,
    raw_result,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.region import accept_language, duckduckgo_kl
from gateway.search.transport import ProviderRequest, ProviderResponse

DEFAULT_BASE_URL = "https://html.duckduckgo.com"
_FRESHNESS = {Freshness.DAY: "d", Freshness.WEEK: "w", Freshness.MONTH: "m", Freshness.YEAR: "y"}
_ANOMALY_MARKERS = (b"anomaly-modal", b"challenge-form", b"anomaly.js", b"bots use DuckDuckGo")
# Statuses the endpoint uses for "this looks like a bot" (the old ddgs list), besides 202.
_BLOCK_STATUSES = {202, 303, 403, 418, 429}


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    form = {"q": query_with_site_operators(query, or_supported=False), "b": ""}
    region = query.region_parts
    kl = duckduckgo_kl(region) if region else None
    if kl:
        form["kl"] = kl
    if query.freshness and not query.time_range:
        form["df"] = _FRESHNESS[query.freshness]
    return ProviderRequest(
        method="POST",
        url=endpoint(base_url, "/html/"),
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "User-Agent": HTML_USER_AGENT,
            "Referer": "https://html.duckduckgo.com/",
            "Accept": "text/html",
            "Accept-Language": accept_language(region),
        },
        body=urlencode(form).encode(),
    )


def applies_time_filter(query: SearchQuery) -> bool:
    # Only the d/w/m/y buckets are known to work; a custom date range is not.
    return query.freshness is not None and query.time_range is None


def parse(response: ProviderResponse) -> list[RawResult]:
    if response.status in _BLOCK_STATUSES or _looks_like_challenge(response.body):
        raise ProviderError(
            ErrorClass.RATE_LIMITED,
            f"bot challenge (anomaly page, HTTP {response.status}): DuckDuckGo is limiting "
            "this address",
        )
    failure = failure_for_status(response)
    if failure:
        raise failure
    tree = load_html(response)
    links = tree.xpath("//div[@id='links']")
    if not links:
        if b"No results" in response.body or tree.xpath("//div[contains(@class,'no-results')]"):
            return []
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "page layout not recognised (no #links)")
    results: list[RawResult] = []
    for block in _result_blocks(links[0]):
        anchor = next(iter(block.xpath(".//h2//a[@href]")), None)
        if anchor is None:
            continue
        target = _unwrap(anchor.get("href", ""))
        if target is None:
            continue
        snippet = next(iter(block.xpath(".//*[contains(@class,'result__snippet')]")), None)
        result = raw_result(node_text(anchor), target, node_text(snippet))
        if result:
            results.append(result)
    return results


def _result_blocks(links: Any) -> list[Any]:
    blocks = links.xpath(
        ".//div[contains(concat(' ', normalize-space(@class), ' '), ' result ')"
        " and not(contains(@class, 'result--ad'))]"
    )
    return list(blocks[:MAX_PARSED_RESULTS])


def _unwrap(href: str) -> str | None:
    """The real target of a result link; None for ads and links that are not http(s)."""
    href = href.strip()
    if href.startswith("//"):
        href = "https:" + href
    parts = urlsplit(href)
    host = (parts.hostname or "").lower()
    if host == "duckduckgo.com" or host.endswith(".duckduckgo.com"):
        if parts.path.startswith("/y.js"):
            return None  # an ad
        if parts.path.startswith("/l/"):
            target = parse_qs(parts.query).get("uddg", [""])[0]
            return target or None
    return href if parts.scheme in ("http", "https") else None


def _looks_like_challenge(body: bytes) -> bool:
    head = body[:200_000]
    return any(marker in head for marker in _ANOMALY_MARKERS)


ADAPTER = ProviderAdapter(
    kind="duckduckgo",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=False,
    build_request=build_request,
    parse=parse,
    applies_time_filter=applies_time_filter,
)
