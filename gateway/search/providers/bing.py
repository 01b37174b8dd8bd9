"""Bing's keyless HTML results page.

Results are `ol#b_results > li.b_algo`; links may be wrapped as bing.com/ck/a?…&u=a1<base64url>.
A page without `ol#b_results`, or with a challenge, is treated as blocked (`[rate_limited]`).
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import date
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
    read_count,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.region import accept_language, locale_tag
from gateway.search.transport import ProviderRequest, ProviderResponse

DEFAULT_BASE_URL = "https://www.bing.com"
_FRESHNESS = {Freshness.DAY: "ez1", Freshness.WEEK: "ez2", Freshness.MONTH: "ez3"}
_CHALLENGE_MARKERS = ("challenge-container", "iframe-challenge", "b_captcha")
_EPOCH = date(1970, 1, 1)


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    params = {"q": query_with_site_operators(query, or_supported=True), "count": str(50)}
    region = query.region_parts
    market = locale_tag(region) if region else None
    if region and market:
        params["mkt"] = market
        params["setlang"] = market.split("-")[0]
    elif region:
        params["cc"] = region.country.upper()
    # Sent as a courtesy; since 2026 the HTML page is said to need JavaScript for these, so
    # applies_time_filter never claims them.
    if query.time_range:
        start, end = ((d - _EPOCH).days for d in query.time_range)
        params["filters"] = f'ex1:"ez5_{start}_{end}"'
    elif query.freshness in _FRESHNESS:
        params["filters"] = f'ex1:"{_FRESHNESS[query.freshness]}"'
    return ProviderRequest(
        method="GET",
        url=endpoint(base_url, "/search") + "?" + urlencode(params),
        headers={
            "User-Agent": HTML_USER_AGENT,
            "Accept": "text/html",
            "Accept-Language": accept_language(region, "en,en;q=0.9"),
        },
    )


def applies_time_filter(query: SearchQuery) -> bool:
    return False


def parse(response: ProviderResponse) -> list[RawResult]:
    failure = failure_for_status(response)
    if failure:
        raise failure
    tree = load_html(response)
    if any(tree.xpath(f"//*[contains(@id,'{m}') or contains(@class,'{m}')]")
           for m in _CHALLENGE_MARKERS):  # fmt: skip
        raise ProviderError(
            ErrorClass.RATE_LIMITED, "challenge page: Bing is limiting this address"
        )
    lists = tree.xpath("//ol[@id='b_results']")
    if not lists:
        raise ProviderError(
            ErrorClass.RATE_LIMITED, "no result list on the page (blocked or a challenge)"
        )
    results: list[RawResult] = []
    for item in lists[0].xpath("./li[contains(@class,'b_algo')]")[:MAX_PARSED_RESULTS]:
        anchor = next(iter(item.xpath(".//h2//a[@href]")), None)
        if anchor is None:
            continue
        target = unwrap(anchor.get("href", ""))
        if target is None:
            continue
        paragraph = next(iter(item.xpath(".//div[contains(@class,'b_caption')]//p")), None)
        published = None
        if paragraph is not None:
            for icon in paragraph.xpath(".//span[contains(@class,'algoSlug_icon')]"):
                icon.drop_tree()
            date_span = next(iter(paragraph.xpath(".//span[contains(@class,'news_dt')]")), None)
            if date_span is not None:
                published = node_text(date_span).strip()
                date_span.drop_tree()
        snippet = node_text(paragraph).strip().lstrip("·\u2002 ").strip()
        result = raw_result(node_text(anchor), target, snippet, published)
        if result:
            results.append(result)
    return results


# "About 1,230,000 results" (or "1.230.000 Ergebnisse"): read from the bytes, not a second tree.
_COUNT = re.compile(rb'class="sb_count"[^>]{0,200}>[^<0-9]{0,40}([0-9][0-9,.\s\xc2\xa0]{0,30})')


def parse_total(response: ProviderResponse) -> int | None:
    """Bing's estimate of the number of results (its `sb_count` line), where the page has it."""
    if response.status != 200:
        return None
    match = _COUNT.search(response.body[:400_000])
    return read_count(match.group(1).decode("utf-8", "replace").strip()) if match else None


def unwrap(href: str) -> str | None:
    """The real target of a result link; None for ad clicks and undecodable wrappers."""
    parts = urlsplit(href.strip())
    host = (parts.hostname or "").lower()
    if host.endswith("bing.com"):
        if parts.path.startswith("/aclick"):
            return None
        if parts.path.startswith("/ck/a"):
            encoded = parse_qs(parts.query).get("u", [""])[0]
            if not encoded.startswith("a1"):
                return None
            encoded = encoded[2:]
            try:
                padded = encoded + "=" * (-len(encoded) % 4)
                target = base64.b64decode(padded, altchars=b"-_", validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                return None
            return target if target.startswith(("https://", "http://")) else None
    return href.strip() if parts.scheme in ("http", "https") else None


ADAPTER = ProviderAdapter(
    kind="bing",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=False,
    build_request=build_request,
    parse=parse,
    applies_time_filter=applies_time_filter,
    parse_total=parse_total,
)
