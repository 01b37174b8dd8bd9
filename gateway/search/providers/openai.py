"""OpenAI's Responses API with the `web_search` tool (POST /v1/responses, Bearer key).

Results are the answer's `url_citation` annotations (title, and the sentence that cites the
page as its snippet), or, when nothing was cited, the sources the searches returned
(`include: web_search_call.action.sources`). `site`/`include_domains` become the tool's
`filters.allowed_domains`; the API has no block list, so `exclude_domains` is asked for in the
prompt and enforced on the results. Errors: {"error": {"message", "type", "code"}}; a 429
`insufficient_quota` is a spent quota (cools long), any other 429 honours `retry-after` and
`retry-after-ms`.
"""

from __future__ import annotations

from typing import Any

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import (
    ProviderSettings,
    bearer_json,
    json_post,
    settings_adapter,
)
from gateway.search.providers.decoding import (
    QUOTA_RETRY_AFTER,
    dig,
    error_text,
    items,
    keyed_failure,
    load_json_object,
    load_json_or_none,
)
from gateway.search.providers.model_native import (
    capped_answer,
    cited_results,
    no_time_filter,
    prompt,
)
from gateway.search.query import RawResult, SearchQuery
from gateway.search.transport import (
    MAX_RETRY_AFTER,
    ProviderRequest,
    ProviderResponse,
    retry_after_seconds,
)

DEFAULT_BASE_URL = "https://api.openai.com"
DEFAULT_MODEL = "gpt-5-mini"
_SNIPPET_CHARS = 300


def build_from_settings(query: SearchQuery, settings: ProviderSettings) -> ProviderRequest:
    tool: dict[str, Any] = {"type": "web_search"}
    if query.wanted_domains:
        tool["filters"] = {"allowed_domains": list(query.wanted_domains)}
    if query.country:
        tool["user_location"] = {"type": "approximate", "country": query.country.upper()}
    body = {
        "model": settings.model or DEFAULT_MODEL,
        "input": prompt(query),
        "tools": [tool],
        "tool_choice": "required",
        "include": ["web_search_call.action.sources"],
        "store": False,
    }
    return json_post(settings.base_url, "/v1/responses", body, bearer_json(settings.api_key))


def parse(response: ProviderResponse) -> list[RawResult]:
    data = _answer(response)
    citations: list[dict[str, Any]] = []
    sources: list[dict[str, Any]] = []
    for item in items(data.get("output")):
        if item.get("type") == "web_search_call":
            for source in items(dig(item, "action", "sources")):
                sources.append({"url": source.get("url")})
        for text, annotation in _annotations(item):
            start = annotation.get("start_index")
            citations.append(
                {
                    "url": annotation.get("url"),
                    "title": annotation.get("title"),
                    "snippet": _citing_sentence(text, start) if isinstance(start, int) else "",
                }
            )
    return cited_results(citations, sources)


def parse_answer(response: ProviderResponse) -> str | None:
    data = _answer(response)
    parts = []
    for item in items(data.get("output")):
        if item.get("type") == "message":
            for content in items(item.get("content")):
                if content.get("type") == "output_text" and isinstance(content.get("text"), str):
                    parts.append(content["text"])
    return capped_answer(parts)


def _answer(response: ProviderResponse) -> dict[str, Any]:
    if response.status != 200:
        raise _failure(response)
    data = load_json_object(response, list_key="output")
    error = data.get("error")
    if isinstance(error, dict) or data.get("status") == "failed":
        message = dig(error, "message") or "the response failed"
        raise ProviderError(
            ErrorClass.SERVER_ERROR, f"response failed: {error_text(response, message)}"
        )
    return data


def _annotations(item: Any) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if item.get("type") != "message":
        return found
    for content in items(item.get("content")):
        text = content.get("text")
        if content.get("type") != "output_text" or not isinstance(text, str):
            continue
        for annotation in items(content.get("annotations")):
            if annotation.get("type") == "url_citation":
                found.append((text, dict(annotation)))
    return found


def _citing_sentence(text: str, index: int) -> str:
    """The sentence before a citation: from the previous sentence end up to the citation."""
    index = max(0, min(index, len(text)))
    head = text[max(0, index - _SNIPPET_CHARS) : index]
    cut = max(head.rfind(". "), head.rfind("\n"), head.rfind("。"))
    return (head[cut + 1 :] if cut >= 0 else head).strip(" (")


def _failure(response: ProviderResponse) -> ProviderError:
    body = load_json_or_none(response)
    code = dig(body, "error", "code")
    text = error_text(response, dig(body, "error", "message"))
    if response.status == 429:
        if code == "insufficient_quota":
            return ProviderError(
                ErrorClass.RATE_LIMITED, f"HTTP 429 (quota spent): {text}", QUOTA_RETRY_AFTER
            )
        return ProviderError(ErrorClass.RATE_LIMITED, f"HTTP 429: {text}", _retry_after(response))
    return keyed_failure(response, text)


def _retry_after(response: ProviderResponse) -> float | None:
    wait = retry_after_seconds(response)
    if wait is not None:
        return wait
    raw = (response.headers.get("retry-after-ms") or "").strip()
    if raw.isascii() and raw.isdigit():
        return min(int(raw[:9]) / 1000, MAX_RETRY_AFTER)
    return None


ADAPTER = settings_adapter(
    "openai",
    DEFAULT_BASE_URL,
    build_from_settings,
    parse,
    no_time_filter,
    parse_answer=parse_answer,
    default_model=DEFAULT_MODEL,
)
