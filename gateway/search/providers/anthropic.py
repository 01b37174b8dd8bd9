"""Anthropic's Messages API with the web search server tool (POST /v1/messages, x-api-key).

Results are the sources the answer cites (`web_search_result_location` citations, their
`cited_text` as the snippet), or, when nothing was cited, every `web_search_result` the tool
returned (title, `page_age` as the date). `site`/`include_domains` become the tool's
`allowed_domains`, else `exclude_domains` its `blocked_domains` (the API refuses both at
once). A tool error arrives with HTTP 200 as `web_search_tool_result_error`: it fails the
provider only when no result came back. HTTP errors: {"type": "error", "error": {"type",
"message"}}; 429 honours `retry-after` unless the spend limit is reached (cools long), 529
(overloaded) and 5xx are server errors.
"""

from __future__ import annotations

from typing import Any

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderSettings, json_post, settings_adapter
from gateway.search.providers.decoding import (
    QUOTA_RETRY_AFTER,
    dig,
    error_text,
    items,
    keyed_failure,
    load_json_object,
    load_json_or_none,
    parse_date,
)
from gateway.search.providers.model_native import (
    capped_answer,
    cited_results,
    no_time_filter,
    prompt,
)
from gateway.search.query import RawResult, SearchQuery
from gateway.search.transport import ProviderRequest, ProviderResponse, retry_after_seconds

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"
API_VERSION = "2023-06-01"
TOOL_VERSION = "web_search_20250305"
MAX_USES = 3
MAX_TOKENS = 1024
_TOOL_ERRORS = {
    "too_many_requests": ErrorClass.RATE_LIMITED,
    "unavailable": ErrorClass.SERVER_ERROR,
    "max_uses_exceeded": ErrorClass.SERVER_ERROR,
    "invalid_tool_input": ErrorClass.HTTP_4XX,
    "query_too_long": ErrorClass.HTTP_4XX,
    "request_too_large": ErrorClass.HTTP_4XX,
}


def build_from_settings(query: SearchQuery, settings: ProviderSettings) -> ProviderRequest:
    tool: dict[str, Any] = {"type": TOOL_VERSION, "name": "web_search", "max_uses": MAX_USES}
    if query.wanted_domains:
        tool["allowed_domains"] = list(query.wanted_domains)
    elif query.exclude_domains:
        tool["blocked_domains"] = list(query.exclude_domains)
    if query.country:
        tool["user_location"] = {"type": "approximate", "country": query.country.upper()}
    body = {
        "model": settings.model or DEFAULT_MODEL,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": prompt(query)}],
        "tools": [tool],
    }
    headers = {
        "Accept": "application/json",
        "x-api-key": settings.api_key or "",
        "anthropic-version": API_VERSION,
    }
    return json_post(settings.base_url, "/v1/messages", body, headers)


def parse(response: ProviderResponse) -> list[RawResult]:
    blocks = _content(response)
    searched: list[dict[str, Any]] = []
    cited: list[dict[str, Any]] = []
    tool_error: str | None = None
    for block in blocks:
        kind = block.get("type")
        if kind == "web_search_tool_result":
            content = block.get("content")
            if isinstance(content, dict):
                tool_error = str(content.get("error_code") or "unknown")
            for result in items(content):
                searched.append(
                    {
                        "url": result.get("url"),
                        "title": result.get("title"),
                        "published": result.get("page_age"),
                    }
                )
        elif kind == "text":
            for citation in items(block.get("citations")):
                if citation.get("type") == "web_search_result_location":
                    cited.append(
                        {
                            "url": citation.get("url"),
                            "title": citation.get("title"),
                            "snippet": citation.get("cited_text"),
                        }
                    )
    results = cited_results(cited, searched)
    if not results and tool_error is not None:
        cls = _TOOL_ERRORS.get(tool_error, ErrorClass.SERVER_ERROR)
        raise ProviderError(cls, f"the web search tool failed: {error_text(response, tool_error)}")
    dates = {entry["url"]: entry.get("published") for entry in searched}
    return [
        RawResult(r.title, r.url, r.snippet, r.published_at or parse_date(dates.get(r.url)))
        for r in results
    ]


def parse_answer(response: ProviderResponse) -> str | None:
    blocks = _content(response)
    searched = next(
        (i for i, b in enumerate(blocks) if b.get("type") == "web_search_tool_result"), -1
    )
    parts = [
        b["text"]
        for b in blocks[searched + 1 :]
        if b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return capped_answer(parts)


def _content(response: ProviderResponse) -> list[dict[str, Any]]:
    if response.status != 200:
        raise _failure(response)
    data = load_json_object(response, list_key="content")
    return [dict(block) for block in items(data.get("content"))]


def _failure(response: ProviderResponse) -> ProviderError:
    body = load_json_or_none(response)
    kind = dig(body, "error", "type")
    text = error_text(response, dig(body, "error", "message"))
    if response.status == 429:
        if dig(body, "error", "details", "error_code") == "enforced_spend_limit_reached":
            return ProviderError(
                ErrorClass.RATE_LIMITED, f"HTTP 429 (spend limit): {text}", QUOTA_RETRY_AFTER
            )
        return ProviderError(
            ErrorClass.RATE_LIMITED, f"HTTP 429: {text}", retry_after_seconds(response)
        )
    if response.status == 529 or kind == "overloaded_error":
        return ProviderError(
            ErrorClass.SERVER_ERROR, f"HTTP {response.status} (overloaded): {text}"
        )
    return keyed_failure(response, text)


ADAPTER = settings_adapter(
    "anthropic",
    DEFAULT_BASE_URL,
    build_from_settings,
    parse,
    no_time_filter,
    parse_answer=parse_answer,
    default_model=DEFAULT_MODEL,
)
