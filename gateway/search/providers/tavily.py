"""Tavily `/search` (POST JSON, Bearer key).

Errors come as {"detail": {"error": "…"}} (also a plain string detail, or the keyless
{"error": {"message", "retry_after_seconds"}}); 432/433 are plan and spending limits.
"""

from __future__ import annotations

from typing import Any

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import (
    ProviderAdapter,
    bearer_json,
    honours_time_filter,
    json_post,
)
from gateway.search.providers.decoding import (
    MAX_ANSWER_CHARS,
    QUOTA_RETRY_AFTER,
    clean_text,
    dig,
    error_text,
    items,
    keyed_failure,
    load_json_object,
    load_json_or_none,
    raw_results,
)
from gateway.search.query import RawResult, SearchQuery
from gateway.search.transport import (
    MAX_RETRY_AFTER,
    ProviderRequest,
    ProviderResponse,
    retry_after_seconds,
)

DEFAULT_BASE_URL = "https://api.tavily.com"
# Tavily's `country` is a lower-case English name and only these are worth a table here.
_COUNTRIES = {
    "us": "united states", "gb": "united kingdom", "uk": "united kingdom", "cn": "china",
    "de": "germany", "fr": "france", "jp": "japan", "in": "india", "ca": "canada",
    "au": "australia", "br": "brazil", "es": "spain", "it": "italy", "kr": "south korea",
    "nl": "netherlands", "se": "sweden", "ch": "switzerland", "sg": "singapore", "tw": "taiwan",
    "hk": "hong kong", "mx": "mexico", "ru": "russia",
}  # fmt: skip
_QUOTA_STATUSES = {432, 433}


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    body: dict[str, Any] = {
        "query": query.query,
        "max_results": query.max_results,
        "search_depth": "basic",
        "topic": "general",
        "include_answer": True,  # Tavily's own short answer, returned as `answer`
        "include_raw_content": False,
    }
    if query.time_range:
        body["start_date"], body["end_date"] = (d.isoformat() for d in query.time_range)
    elif query.freshness:
        body["time_range"] = str(query.freshness)
    if query.wanted_domains:
        body["include_domains"] = list(query.wanted_domains)
    if query.exclude_domains:
        body["exclude_domains"] = list(query.exclude_domains)
    if query.country in _COUNTRIES:
        body["country"] = _COUNTRIES[query.country]
    return json_post(base_url, "/search", body, bearer_json(api_key))


def parse(response: ProviderResponse) -> list[RawResult]:
    if response.status != 200:
        raise _failure(response)
    data = load_json_object(response, list_key="results")
    return raw_results(
        items(data.get("results")),
        title="title",
        url="url",
        snippet="content",
        published="published_date",
        score="score",
    )


def parse_answer(response: ProviderResponse) -> str | None:
    """Tavily's `answer` (asked for with include_answer), when it wrote one."""
    if response.status != 200:
        return None
    answer = load_json_object(response, list_key="results").get("answer")
    return clean_text(answer, MAX_ANSWER_CHARS) or None if isinstance(answer, str) else None


def _failure(response: ProviderResponse) -> ProviderError:
    body = load_json_or_none(response)
    detail = dig(body, "detail")
    message = dig(detail, "error") if isinstance(detail, dict) else detail
    keyless = dig(body, "error")
    if message is None and isinstance(keyless, dict):
        message = keyless.get("message") or keyless.get("code")
    text = error_text(response, message)
    if response.status in _QUOTA_STATUSES:
        return ProviderError(
            ErrorClass.RATE_LIMITED,
            f"HTTP {response.status} (plan limit): {text}",
            QUOTA_RETRY_AFTER,
        )
    if response.status == 429:
        wait = retry_after_seconds(response)
        hinted = dig(keyless, "retry_after_seconds")
        if wait is None and isinstance(hinted, int | float) and not isinstance(hinted, bool):
            wait = min(max(float(hinted), 0.0), MAX_RETRY_AFTER)
        return ProviderError(ErrorClass.RATE_LIMITED, f"HTTP 429: {text}", wait)
    return keyed_failure(response, text)


ADAPTER = ProviderAdapter(
    kind="tavily",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=True,
    build_request=build_request,
    parse=parse,
    applies_time_filter=honours_time_filter,
    parse_answer=parse_answer,
)
