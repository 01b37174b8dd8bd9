from __future__ import annotations

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.searxng import ADAPTER
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

OK = {
    "query": "rust async runtime", "answers": [], "corrections": [], "infoboxes": [],
    "suggestions": ["tokio vs async-std"], "unresponsive_engines": [["duckduckgo", "CAPTCHA"]],
    "results": [
        {"url": "https://tokio.rs/", "title": "Tokio - An asynchronous Rust runtime",
         "content": "Tokio is an asynchronous runtime for Rust ...", "engine": "brave",
         "engines": ["brave", "startpage"], "positions": [1, 2], "score": 3.0,
         "parsed_url": ["https", "tokio.rs", "/", "", "", ""],
         "publishedDate": "2025-01-20T00:00:00", "pubdate": ""},
        {"url": "https://async.rs/", "title": "async-std", "content": None, "publishedDate": None},
    ],
}  # fmt: skip


async def test_parses_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, OK), api_key=None)
    assert [(r.url, r.snippet, r.published_at) for r in results] == [
        ("https://tokio.rs/", "Tokio is an asynchronous runtime for Rust ...",
         "2025-01-20T00:00:00"),
        ("https://async.rs/", "", None),
    ]  # fmt: skip
    assert "Authorization" not in fake.requests[0].headers


async def test_request_mapping(ask) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields(
        {"query": "q", "region": "de-de", "freshness": "month", "site": "a.org"}
    )
    _, fake = await ask(ADAPTER, Reply(200, OK), query, api_key=None)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("GET", "/search")
    assert sent.query == {"q": "q site:a.org", "format": "json", "pageno": "1",
                          "language": "de-DE", "time_range": "month"}  # fmt: skip
    assert ADAPTER.applies_time_filter(query) is False


@pytest.mark.parametrize(
    ("reply", "error_class", "words"),
    [
        pytest.param(Reply(403, "<html>Forbidden</html>"), ErrorClass.HTTP_4XX,
                     "JSON output is turned off", id="403-json-off"),
        pytest.param(Reply(429, "Too Many Requests"), ErrorClass.RATE_LIMITED, "Too Many", id="429"),
        pytest.param(Reply(400, {"error": "No query"}), ErrorClass.HTTP_4XX, "No query", id="400"),
        pytest.param(Reply(500, {"error": "search error"}), ErrorClass.SERVER_ERROR,
                     "search error", id="500"),
        pytest.param(Reply(200, {**OK, "results": []}), ErrorClass.SERVER_ERROR,
                     "duckduckgo CAPTCHA", id="all-engines-failed"),
    ],
)  # fmt: skip
async def test_error_shapes(ask, reply: Reply, error_class: ErrorClass, words: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply, api_key=None)
    assert caught.value.error_class is error_class
    assert words in caught.value.message


async def test_no_results_without_engine_failures_is_empty(ask) -> None:  # type: ignore[no-untyped-def]
    body = {**OK, "results": [], "unresponsive_engines": [], "number_of_results": 0}
    results, _ = await ask(ADAPTER, Reply(200, body), api_key=None)
    assert results == []


async def test_scores_are_read_integral_ones_as_integers(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, OK), api_key=None)
    assert [r.score for r in results] == [3, None]
    assert isinstance(results[0].score, int)  # written "3" by orjson and by RFC 8785 alike
