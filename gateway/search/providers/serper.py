"""Serper (Google results as JSON; POST, X-API-KEY).

Errors are small JSON objects ({"message", "statusCode"}); "Not enough credits" arrives as a
400 and is a spent quota, so it cools the provider like a rate limit.
"""

from __future__ import annotations

from typing import Any

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderAdapter, honours_time_filter, json_post
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
    query_with_site_operators,
    raw_results,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.region import TRADITIONAL_CHINESE
from gateway.search.transport import ProviderRequest, ProviderResponse

DEFAULT_BASE_URL = "https://google.serper.dev"
_FRESHNESS = {Freshness.DAY: "qdr:d", Freshness.WEEK: "qdr:w", Freshness.MONTH: "qdr:m",
              Freshness.YEAR: "qdr:y"}  # fmt: skip


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    body: dict[str, Any] = {
        "q": query_with_site_operators(query, or_supported=True),
        "num": query.max_results,
    }
    region = query.region_parts
    if region:
        body["gl"] = region.country
        language = region.search_language
        if language == "zh":  # Google's interface languages for Chinese
            language = "zh-tw" if region.country in TRADITIONAL_CHINESE else "zh-cn"
        if language:
            body["hl"] = language
    if query.time_range:
        start, end = (d.strftime("%m/%d/%Y") for d in query.time_range)
        body["tbs"] = f"cdr:1,cd_min:{start},cd_max:{end}"
    elif query.freshness:
        body["tbs"] = _FRESHNESS[query.freshness]
    return json_post(base_url, "/search", body, {"X-API-KEY": api_key or ""})


def parse(response: ProviderResponse) -> list[RawResult]:
    if response.status != 200:
        raise _failure(response)
    data = load_json_object(response)
    return raw_results(
        items(data.get("organic")), title="title", url="link", snippet="snippet", published="date"
    )


def parse_answer(response: ProviderResponse) -> str | None:
    """Google's answer box, as Serper passes it on: its `answer`, else its `snippet`."""
    if response.status != 200:
        return None
    box = load_json_object(response).get("answerBox")
    if not isinstance(box, dict):
        return None
    text = box.get("answer") if isinstance(box.get("answer"), str) else box.get("snippet")
    return clean_text(text, MAX_ANSWER_CHARS) or None


def _failure(response: ProviderResponse) -> ProviderError:
    text = error_text(response, dig(load_json_or_none(response), "message"))
    if "credit" in text.lower():
        return ProviderError(
            ErrorClass.RATE_LIMITED, f"HTTP {response.status}: {text}", QUOTA_RETRY_AFTER
        )
    return keyed_failure(response, text)


ADAPTER = ProviderAdapter(
    kind="serper",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=True,
    build_request=build_request,
    parse=parse,
    applies_time_filter=honours_time_filter,
    parse_answer=parse_answer,
)
