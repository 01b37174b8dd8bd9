"""SearXNG's JSON API (self-hosted, keyless).

An instance with JSON output turned off answers 403: the warning says how to turn it on.
Engine failures stay HTTP 200 (`unresponsive_engines`); all engines failing with no results
is a server error, not "nothing found".
"""

from __future__ import annotations

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderAdapter, query_get
from gateway.search.providers.decoding import (
    dig,
    error_text,
    excerpt,
    items,
    load_json_object,
    load_json_or_none,
    query_with_site_operators,
    raw_results,
    unexpected_status,
)
from gateway.search.query import RawResult, SearchQuery
from gateway.search.region import locale_tag
from gateway.search.transport import ProviderRequest, ProviderResponse

DEFAULT_BASE_URL = "http://127.0.0.1:8888"  # self-hosted only: there is no public default


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    params = {
        "q": query_with_site_operators(query, or_supported=False),
        "format": "json",
        "pageno": "1",
    }
    region = query.region_parts
    language = locale_tag(region) if region else None
    if language:
        params["language"] = language
    # SearXNG has no date range, and engines without time filtering ignore time_range.
    if query.freshness and not query.time_range:
        params["time_range"] = str(query.freshness)
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"  # for instances behind an auth proxy
    return query_get(base_url, "/search", params, headers)


def applies_time_filter(query: SearchQuery) -> bool:
    # Sent, but engines that cannot filter by time silently ignore it: never claimed.
    return False


def parse(response: ProviderResponse) -> list[RawResult]:
    if response.status == 403:
        raise ProviderError(
            ErrorClass.HTTP_4XX,
            "HTTP 403: JSON output is turned off on this SearXNG instance; "
            "add json to search.formats in its settings.yml",
        )
    if response.status != 200:
        text = error_text(response, dig(load_json_or_none(response), "error"))
        raise unexpected_status(response, text)
    data = load_json_object(response, list_key="results")
    results = raw_results(
        items(data.get("results")),
        title="title",
        url="url",
        snippet="content",
        published="publishedDate",
        score="score",
    )
    unresponsive = data.get("unresponsive_engines")
    if not results and isinstance(unresponsive, list) and unresponsive:
        names = ", ".join(
            excerpt(" ".join(str(part) for part in pair[:2]), 60)
            for pair in unresponsive[:5]
            if isinstance(pair, list)
        )
        raise ProviderError(ErrorClass.SERVER_ERROR, f"no results; engines failed: {names}")
    return results


ADAPTER = ProviderAdapter(
    kind="searxng",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=False,
    build_request=build_request,
    parse=parse,
    applies_time_filter=applies_time_filter,
)
