from __future__ import annotations

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.brave import ADAPTER
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

OK = {
    "type": "search",
    "query": {"original": "aiohttp middleware", "more_results_available": True},
    "web": {"type": "search", "family_friendly": True, "results": [
        {"type": "search_result", "subtype": "generic",
         "title": "Middlewares — <strong>aiohttp</strong> documentation",
         "url": "https://docs.aiohttp.org/en/stable/web_advanced.html",
         "description": "A middleware is a coroutine that can modify the request or response...",
         "age": "March 3, 2025", "page_age": "2025-03-03T09:12:00", "language": "en",
         "meta_url": {"scheme": "https", "netloc": "docs.aiohttp.org",
                      "hostname": "docs.aiohttp.org", "path": "› en › stable"}},
        {"title": "No date", "url": "https://example.com/x", "age": "2 days ago"},
        {"title": "Not a web URL", "url": "ftp://example.com/x"},
        "not an object",
    ]},
}  # fmt: skip


def _error(status: int, code: str, detail: str) -> dict:
    return {"type": "ErrorResponse", "time": 1741000000,
            "error": {"id": "c0ffee", "status": status, "code": code, "detail": detail,
                      "meta": {"component": "rate_limiter"}}}  # fmt: skip


RATE_HEADERS = {
    "X-RateLimit-Limit": "1, 15000",
    "X-RateLimit-Policy": "1;w=1, 15000;w=2592000",
    "X-RateLimit-Remaining": "0, 1000",
    "X-RateLimit-Reset": "1, 1419704",
}


async def test_parses_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, OK))
    assert [(r.title, r.url, r.published_at) for r in results] == [
        ("Middlewares — aiohttp documentation",
         "https://docs.aiohttp.org/en/stable/web_advanced.html", "2025-03-03T09:12:00"),
        ("No date", "https://example.com/x", None),
    ]  # fmt: skip
    assert fake.requests[0].headers["X-Subscription-Token"] == "test-key-123456"


async def test_request_mapping(ask) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields(
        {"query": "q", "max_results": 7, "region": "cn-zh", "exclude_domains": ["x.com"],
         "time_range": "2025-01-01..2025-12-31", "freshness": "day"}
    )  # fmt: skip
    _, fake = await ask(ADAPTER, Reply(200, OK), query)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("GET", "/res/v1/web/search")
    assert sent.query == {
        "q": "q -site:x.com", "count": "7", "text_decorations": "false", "country": "CN",
        "search_lang": "zh-hans", "freshness": "2025-01-01to2025-12-31",
    }  # fmt: skip
    assert ADAPTER.applies_time_filter(query)


async def test_missing_web_section_is_no_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, {"type": "search", "query": {"original": "q"}}))
    assert results == []


@pytest.mark.parametrize(
    ("reply", "error_class", "retry_after", "words"),
    [
        pytest.param(Reply(422, _error(422, "SUBSCRIPTION_TOKEN_INVALID", "The provided token is invalid.")),
                     ErrorClass.HTTP_4XX, None, "API key was refused", id="422-bad-key"),
        pytest.param(Reply(422, {"type": "ErrorResponse", "errors": [{"code": "VALIDATION",
                     "detail": "Unable to validate request parameter(s)"}]}),
                     ErrorClass.HTTP_4XX, None, "VALIDATION", id="422-validation-errors-array"),
        pytest.param(Reply(429, _error(429, "RATE_LIMITED", "Request rate limit exceeded for plan."),
                           RATE_HEADERS),
                     ErrorClass.RATE_LIMITED, 1.0, "RATE_LIMITED", id="429-per-second"),
        pytest.param(Reply(429, _error(429, "QUOTA_LIMITED", "Monthly quota exceeded."), RATE_HEADERS),
                     # the monthly window's reset (1419704 s) is held to the one Retry-After cap
                     ErrorClass.RATE_LIMITED, 600.0, "QUOTA_LIMITED", id="429-quota"),
        pytest.param(Reply(429, _error(429, "RATE_LIMITED", "x"), {"Retry-After": "3"}),
                     ErrorClass.RATE_LIMITED, 3.0, "RATE_LIMITED", id="429-retry-after-wins"),
        pytest.param(Reply(404, _error(404, "SUBSCRIPTION_NOT_FOUND", "no subscription")),
                     ErrorClass.HTTP_4XX, None, "SUBSCRIPTION_NOT_FOUND", id="404"),
        pytest.param(Reply(502, "<html>Bad gateway</html>"), ErrorClass.SERVER_ERROR, None,
                     "Bad gateway", id="502-html"),
        pytest.param(Reply(200, b"{not json"), ErrorClass.INVALID_RESPONSE, None, "malformed JSON",
                     id="malformed-json"),
        pytest.param(Reply(200, [1, 2]), ErrorClass.INVALID_RESPONSE, None, "JSON object",
                     id="json-not-object"),
    ],
)  # fmt: skip
async def test_error_shapes(  # type: ignore[no-untyped-def]
    ask, reply: Reply, error_class: ErrorClass, retry_after: float | None, words: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert caught.value.error_class is error_class
    assert caught.value.retry_after == retry_after
    assert words in caught.value.message


@pytest.mark.parametrize(
    ("reset", "expected"),
    [
        pytest.param("1, 1419704", [1.0, 600.0], id="two-windows-capped"),
        pytest.param("\xb2, 7", [7.0], id="latin1-superscript-skipped"),
    ],
)
def test_reset_values_take_only_ascii_digits(reset: str, expected: list[float]) -> None:
    from gateway.search.providers.brave import _reset_values
    from gateway.search.transport import ProviderResponse

    assert _reset_values(ProviderResponse(429, {"X-RateLimit-Reset": reset}, b"")) == expected
