"""Serper (Google results as JSON; POST, X-API-KEY).

Errors are small JSON objects ({"message", "statusCode"}); "Not enough credits" arrives as a
400 and is a spent quota, so it cools the provider like a rate limit.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderAdapter, endpoint
from gateway.search.providers.decoding import (
    QUOTA_RETRY_AFTER,
    dig,
    excerpt,
    failure_for_status,
    items,
    load_json,
    load_json_or_none,
    query_with_site_operators,
    raw_result,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.transport import ProviderRequest, ProviderResponse

DEFAULT_BASE_URL = "https://google.serper.dev"
_FRESHNESS = {Freshness.DAY: "qdr:d", Freshness.WEEK: "qdr:w", Freshness.MONTH: "qdr:m",
              Freshness.YEAR: "qdr:y"}  # fmt: skip


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    body: dict[str, Any] = {
        "q": query_with_site_operators(query, or_supported=True),
        "num": query.max_results,
    }
    if query.country:
        body["gl"] = query.country
    if query.language:
        body["hl"] = query.language
    if query.time_range:
        start, end = (d.strftime("%m/%d/%Y") for d in query.time_range)
        body["tbs"] = f"cdr:1,cd_min:{start},cd_max:{end}"
    elif query.freshness:
        body["tbs"] = _FRESHNESS[query.freshness]
    return ProviderRequest(
        method="POST",
        url=endpoint(base_url, "/search"),
        headers={"Content-Type": "application/json", "X-API-KEY": api_key or ""},
        body=orjson.dumps(body),
    )


def applies_time_filter(query: SearchQuery) -> bool:
    return query.has_time_filter


def parse(response: ProviderResponse) -> list[RawResult]:
    if response.status != 200:
        raise _failure(response)
    data = load_json(response)
    if not isinstance(data, dict):
        raise ProviderError(ErrorClass.INVALID_RESPONSE, "expected a JSON object")
    results = []
    for entry in items(data.get("organic")):
        result = raw_result(
            entry.get("title"), entry.get("link"), entry.get("snippet"), entry.get("date")
        )
        if result:
            results.append(result)
    return results


def _failure(response: ProviderResponse) -> ProviderError:
    body = load_json_or_none(response)
    message = dig(body, "message")
    text = excerpt(message) if message is not None else excerpt(response.body)
    if "credit" in text.lower():
        return ProviderError(
            ErrorClass.RATE_LIMITED, f"HTTP {response.status}: {text}", QUOTA_RETRY_AFTER
        )
    if response.status in (401, 403):
        return ProviderError(
            ErrorClass.HTTP_4XX, f"HTTP {response.status}: the API key was refused ({text})"
        )
    return failure_for_status(response, text) or ProviderError(
        ErrorClass.INVALID_RESPONSE, f"unexpected HTTP {response.status}: {text}"
    )


ADAPTER = ProviderAdapter(
    kind="serper",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=True,
    build_request=build_request,
    parse=parse,
    applies_time_filter=applies_time_filter,
)
