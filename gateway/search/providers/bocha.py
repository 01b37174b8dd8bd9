"""Bocha AI web search (博查; POST JSON, Bearer key).

The answer is an envelope {code, msg, data}: an error may come as an HTTP error or inside an
HTTP 200 with `code` other than 200, so the envelope code decides, not only the status.
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
    QUOTA_RETRY_AFTER,
    dig,
    error_text,
    failure_for_status,
    items,
    load_json_object,
    load_json_or_none,
    raw_results,
    read_count,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.transport import ProviderRequest, ProviderResponse

DEFAULT_BASE_URL = "https://api.bochaai.com"
_FRESHNESS = {Freshness.DAY: "oneDay", Freshness.WEEK: "oneWeek", Freshness.MONTH: "oneMonth",
              Freshness.YEAR: "oneYear"}  # fmt: skip


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    body: dict[str, Any] = {"query": query.query, "count": query.max_results, "summary": False}
    if query.time_range:
        start, end = query.time_range
        body["freshness"] = f"{start.isoformat()}..{end.isoformat()}"
    elif query.freshness:
        body["freshness"] = _FRESHNESS[query.freshness]
    else:
        body["freshness"] = "noLimit"
    if query.wanted_domains:
        body["include"] = "|".join(query.wanted_domains)
    if query.exclude_domains:
        body["exclude"] = "|".join(query.exclude_domains)
    return json_post(base_url, "/v1/web-search", body, bearer_json(api_key))


def parse(response: ProviderResponse) -> list[RawResult]:
    if response.status != 200:
        body = load_json_or_none(response)
        raise _failure(_envelope_code(body) or response.status, body, response)
    data = load_json_object(response)
    code = _envelope_code(data)
    if code is not None and code != 200:
        raise _failure(code, data, response)
    return raw_results(
        items(dig(data, "data", "webPages", "value")),
        title="name",
        url="url",
        snippet=("summary", "snippet"),
        published=("datePublished", "dateLastCrawled"),
    )


def parse_total(response: ProviderResponse) -> int | None:
    """Bocha's `webPages.totalEstimatedMatches`."""
    if response.status != 200:
        return None
    return read_count(dig(load_json_object(response), "data", "webPages", "totalEstimatedMatches"))


def _envelope_code(body: Any) -> int | None:
    code = dig(body, "code")
    if isinstance(code, bool):
        return None
    if isinstance(code, int):
        return code
    if isinstance(code, str) and code.strip().isascii() and code.strip().isdigit():
        return int(code.strip()[:4])
    return None


def _failure(code: int, body: Any, response: ProviderResponse) -> ProviderError:
    text = error_text(response, dig(body, "message") or dig(body, "msg"))
    described = f"code {code}: {text}"
    if code == 429:
        return ProviderError(ErrorClass.RATE_LIMITED, described)
    if code == 403 and "money" in text.lower():
        return ProviderError(
            ErrorClass.RATE_LIMITED, f"{described} (balance spent)", QUOTA_RETRY_AFTER
        )
    if code in (401, 403):
        return ProviderError(ErrorClass.HTTP_4XX, f"code {code}: the API key was refused ({text})")
    if code >= 500:
        return ProviderError(ErrorClass.SERVER_ERROR, described)
    if 400 <= code < 500:
        return ProviderError(ErrorClass.HTTP_4XX, described)
    return failure_for_status(response, described) or ProviderError(
        ErrorClass.INVALID_RESPONSE, f"unexpected envelope {described}"
    )


ADAPTER = ProviderAdapter(
    kind="bocha",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=True,
    build_request=build_request,
    parse=parse,
    applies_time_filter=honours_time_filter,
    parse_total=parse_total,
)
