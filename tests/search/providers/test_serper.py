from __future__ import annotations

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.serper import ADAPTER
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

OK = {
    "searchParameters": {"q": "python 3.13 release notes", "gl": "us", "hl": "en",
                         "type": "search", "engine": "google", "tbs": "qdr:w"},
    "organic": [
        {"title": "What's New In Python 3.13", "link": "https://docs.python.org/3/whatsnew/3.13.html",
         "snippet": "This article explains the new features in Python 3.13 ...", "position": 1,
         "date": "Oct 7, 2024"},
        {"title": "No date", "link": "https://example.com/", "snippet": "s", "position": 2},
    ],
    "relatedSearches": [{"query": "python 3.13 free threading"}], "credits": 1,
}  # fmt: skip


async def test_parses_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, OK))
    assert [(r.url, r.published_at) for r in results] == [
        ("https://docs.python.org/3/whatsnew/3.13.html", "2024-10-07"),
        ("https://example.com/", None),
    ]
    assert fake.requests[0].headers["X-API-KEY"] == "test-key-123456"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"freshness": "month"}, {"tbs": "qdr:m"}, id="freshness"),
        pytest.param({"time_range": "2025-01-02..2025-03-04"},
                     {"tbs": "cdr:1,cd_min:01/02/2025,cd_max:03/04/2025"}, id="range"),
        pytest.param({"region": "at-de"}, {"gl": "at", "hl": "de"}, id="region"),
        pytest.param({"include_domains": ["a.org", "b.org"], "exclude_domains": ["c.org"]},
                     {"q": "q (site:a.org OR site:b.org) -site:c.org"}, id="operators"),
    ],
)  # fmt: skip
async def test_request_mapping(ask, fields: dict, expected: dict) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields({"query": "q", "max_results": 3, **fields})
    _, fake = await ask(ADAPTER, Reply(200, OK), query)
    body = fake.requests[0].json()
    assert body["num"] == 3
    assert {k: body[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("reply", "error_class", "retry_after"),
    [
        pytest.param(Reply(400, {"message": "Not enough credits", "statusCode": 400}),
                     ErrorClass.RATE_LIMITED, 600.0, id="400-credits"),
        pytest.param(Reply(400, {"message": "Bad request", "statusCode": 400}),
                     ErrorClass.HTTP_4XX, None, id="400"),
        pytest.param(Reply(403, {"message": "Unauthorized.", "statusCode": 403}),
                     ErrorClass.HTTP_4XX, None, id="403-key"),
        pytest.param(Reply(429, {"message": "Too many requests", "statusCode": 429}),
                     ErrorClass.RATE_LIMITED, None, id="429"),
        pytest.param(Reply(503, "Service Unavailable"), ErrorClass.SERVER_ERROR, None, id="503"),
        pytest.param(Reply(200, b"<html>"), ErrorClass.INVALID_RESPONSE, None, id="html-not-json"),
    ],
)  # fmt: skip
async def test_error_shapes(  # type: ignore[no-untyped-def]
    ask, reply: Reply, error_class: ErrorClass, retry_after: float | None
) -> None:
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert (caught.value.error_class, caught.value.retry_after) == (error_class, retry_after)


async def test_no_organic_section_is_no_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, {"searchParameters": {}, "credits": 1}))
    assert results == []


@pytest.mark.parametrize(
    ("box", "answer"),
    [
        pytest.param({"title": "Python 3.13", "answer": "October 7, 2024"}, "October 7, 2024",
                     id="answer"),
        pytest.param({"title": "t", "snippet": "Released on <b>7 October 2024</b>.",
                      "link": "https://docs.python.org/"}, "Released on 7 October 2024.",
                     id="snippet"),
        pytest.param(None, None, id="none"),
    ],
)  # fmt: skip
async def test_the_answer_box_is_the_answer(upstream, transport, box, answer) -> None:  # type: ignore[no-untyped-def]
    fake = await upstream()
    fake.queue(Reply(200, {**OK, "answerBox": box} if box else OK))
    response = await transport.send(
        ADAPTER.build_request(SearchQuery("q"), fake.base_url, "k"), timeout=5, allow_private=True
    )
    assert ADAPTER.parse_answer is not None and ADAPTER.parse_answer(response) == answer
    assert [r.score for r in ADAPTER.parse(response)] == [None, None]  # Serper has no scores
