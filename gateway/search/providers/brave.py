"""Brave Search API (web).

A bad key is HTTP 422 `SUBSCRIPTION_TOKEN_INVALID`; 429 is `RATE_LIMITED` (per second) or
`QUOTA_LIMITED` (monthly). Brave sends no Retry-After: the wait comes from X-RateLimit-Reset.
"""

from __future__ import annotations

from typing import Any

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.adapter import ProviderAdapter, honours_time_filter, query_get
from gateway.search.providers.decoding import (
    QUOTA_RETRY_AFTER,
    dig,
    excerpt,
    failure_for_status,
    items,
    load_json_object,
    load_json_or_none,
    query_with_site_operators,
    raw_results,
)
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.region import TRADITIONAL_CHINESE, Region
from gateway.search.transport import (
    MAX_RETRY_AFTER,
    ProviderRequest,
    ProviderResponse,
    retry_after_seconds,
)

DEFAULT_BASE_URL = "https://api.search.brave.com"
_FRESHNESS = {
    Freshness.DAY: "pd",
    Freshness.WEEK: "pw",
    Freshness.MONTH: "pm",
    Freshness.YEAR: "py",
}
# The countries Brave's `country` takes (another is a 422) and its own language codes.
_COUNTRY_CODES = "ar au at be br ca cl dk fi fr de hk in id it jp kr my mx nl "
_COUNTRY_CODES += "nz no cn pl pt ph ru sa za es se ch tw tr gb us"
_COUNTRIES = frozenset(_COUNTRY_CODES.split())
_LANGUAGES = {"ja": "jp", "no": "nb"}


def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
    params = {
        "q": query_with_site_operators(query, or_supported=False),
        "count": str(query.max_results),
        "text_decorations": "false",
    }
    region = query.region_parts
    if region and region.country in _COUNTRIES:
        params["country"] = region.country.upper()
    language = _search_lang(region) if region else None
    if language:
        params["search_lang"] = language
    if query.time_range:
        start, end = query.time_range
        params["freshness"] = f"{start.isoformat()}to{end.isoformat()}"
    elif query.freshness:
        params["freshness"] = _FRESHNESS[query.freshness]
    headers = {"Accept": "application/json", "X-Subscription-Token": api_key or ""}
    return query_get(base_url, "/res/v1/web/search", params, headers)


def _search_lang(region: Region) -> str | None:
    language = region.search_language
    if language == "zh":
        return "zh-hant" if region.country in TRADITIONAL_CHINESE else "zh-hans"
    if language == "pt":
        return "pt-br" if region.country == "br" else "pt-pt"
    if language == "en" and region.country == "gb":
        return "en-gb"
    return _LANGUAGES.get(language, language) if language else None


def parse(response: ProviderResponse) -> list[RawResult]:
    if response.status != 200:
        raise _failure(response)
    data = load_json_object(response)
    if data.get("type") == "ErrorResponse":
        raise _failure(response)
    return raw_results(
        items(dig(data, "web", "results")),
        title="title",
        url="url",
        snippet="description",
        published=("page_age", "age"),
    )


def _failure(response: ProviderResponse) -> ProviderError:
    body = load_json_or_none(response)
    error = _error_object(body)
    code = str(error.get("code") or "")
    detail = excerpt(error.get("detail") or "") if error else excerpt(response.body)
    described = f"{code}: {detail}" if code else detail
    if response.status == 429 or code in ("RATE_LIMITED", "QUOTA_LIMITED"):
        wait = retry_after_seconds(response)
        if wait is None:
            resets = _reset_values(response)
            if code == "QUOTA_LIMITED":
                wait = max(resets, default=QUOTA_RETRY_AFTER)
            elif resets:
                wait = resets[0]
        return ProviderError(ErrorClass.RATE_LIMITED, f"HTTP 429 {described}", wait)
    if code == "SUBSCRIPTION_TOKEN_INVALID":
        return ProviderError(
            ErrorClass.HTTP_4XX, f"HTTP {response.status} {code}: the API key was refused"
        )
    return failure_for_status(response, described) or ProviderError(
        ErrorClass.INVALID_RESPONSE, f"error response: {described}"
    )


def _error_object(body: Any) -> dict[str, Any]:
    # The schema says "error": {…}; reference examples show "errors": [{…}]. Accept both.
    error = dig(body, "error")
    if isinstance(error, dict):
        return error
    errors = dig(body, "errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        return errors[0]
    return {}


def _reset_values(response: ProviderResponse) -> list[float]:
    raw = response.headers.get("X-RateLimit-Reset", "")
    values = []
    for part in raw.split(",")[:4]:
        part = part.strip()
        if part.isascii() and part.isdigit():
            values.append(min(float(int(part[:9])), MAX_RETRY_AFTER))
    return values


ADAPTER = ProviderAdapter(
    kind="brave",
    default_base_url=DEFAULT_BASE_URL,
    needs_key=True,
    build_request=build_request,
    parse=parse,
    applies_time_filter=honours_time_filter,
)
