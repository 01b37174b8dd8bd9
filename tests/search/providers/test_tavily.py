from __future__ import annotations

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.tavily import ADAPTER
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

OK = {
    "query": "EU AI Act enforcement", "answer": None, "images": [], "follow_up_questions": None,
    "results": [
        {"title": "EU begins enforcing first AI Act obligations",
         "url": "https://news.example.org/ai-act",
         "content": "Brussels confirmed the prohibited-practice rules ...", "score": 0.8137,
         "raw_content": None, "published_date": "Mon, 03 Feb 2025 10:15:00 GMT"},
        {"title": "Second", "url": "https://b.example.org/", "content": "x", "score": 0.5,
         "raw_content": None},
    ],
    "response_time": "1.42", "usage": {"credits": 1}, "request_id": "5f0c2d9e",
}  # fmt: skip


async def test_parses_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, OK))
    assert [(r.url, r.published_at) for r in results] == [
        ("https://news.example.org/ai-act", "2025-02-03T10:15:00Z"),
        ("https://b.example.org/", None),
    ]
    assert fake.requests[0].headers["Authorization"] == "Bearer test-key-123456"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"freshness": "week"}, {"time_range": "week"}, id="freshness"),
        pytest.param({"time_range": "2025-01-01..2025-06-30", "freshness": "day"},
                     {"start_date": "2025-01-01", "end_date": "2025-06-30"}, id="range-wins"),
        pytest.param({"site": "a.org", "include_domains": ["b.org"], "exclude_domains": ["c.org"]},
                     {"include_domains": ["a.org"], "exclude_domains": ["c.org"]}, id="domains"),
        pytest.param({"region": "de"}, {"country": "germany"}, id="country"),
    ],
)  # fmt: skip
async def test_request_mapping(ask, fields: dict, expected: dict) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields({"query": "q", "max_results": 4, **fields})
    _, fake = await ask(ADAPTER, Reply(200, OK), query)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/search")
    body = sent.json()
    assert body["query"] == "q" and body["max_results"] == 4
    assert {k: body[k] for k in expected} == expected
    assert "time_range" not in body or "start_date" not in body


@pytest.mark.parametrize(
    ("reply", "error_class", "retry_after", "words"),
    [
        pytest.param(Reply(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}}),
                     ErrorClass.HTTP_4XX, None, "missing or invalid API key", id="401"),
        pytest.param(Reply(400, {"detail": {"error": "Invalid time_range"}}),
                     ErrorClass.HTTP_4XX, None, "Invalid time_range", id="400"),
        pytest.param(Reply(429, {"detail": {"error": "Rate limit exceeded"}}),
                     ErrorClass.RATE_LIMITED, None, "Rate limit", id="429"),
        pytest.param(Reply(429, {"error": {"code": "rate_limited", "message": "Keyless limit",
                                           "window": "1m", "retry_after_seconds": 2}}),
                     ErrorClass.RATE_LIMITED, 2.0, "Keyless limit", id="429-keyless"),
        pytest.param(Reply(432, {"detail": {"error": "Plan limit exceeded"}}),
                     ErrorClass.RATE_LIMITED, 600.0, "plan limit", id="432"),
        pytest.param(Reply(433, {"detail": "Pay-as-you-go limit"}),
                     ErrorClass.RATE_LIMITED, 600.0, "Pay-as-you-go", id="433-string-detail"),
        pytest.param(Reply(500, {"detail": {"error": "Internal error"}}),
                     ErrorClass.SERVER_ERROR, None, "Internal error", id="500"),
        pytest.param(Reply(200, {"results": "nope"}), ErrorClass.INVALID_RESPONSE, None,
                     "results list", id="results-not-list"),
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


async def test_empty_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, {**OK, "results": []}))
    assert results == []


async def test_scores_and_the_answer_are_read(upstream, transport) -> None:  # type: ignore[no-untyped-def]
    fake = await upstream()
    fake.queue(Reply(200, {**OK, "answer": "The <b>AI Act</b>'s first bans apply from February."}))
    response = await transport.send(
        ADAPTER.build_request(SearchQuery("q"), fake.base_url, "k"), timeout=5, allow_private=True
    )
    assert fake.requests[0].json()["include_answer"] is True
    assert [r.score for r in ADAPTER.parse(response)] == [0.8137, 0.5]
    assert ADAPTER.parse_answer is not None
    assert ADAPTER.parse_answer(response) == "The AI Act's first bans apply from February."
    fake.queue(Reply(200, OK))  # "answer": null
    again = await transport.send(
        ADAPTER.build_request(SearchQuery("q"), fake.base_url, "k"), timeout=5, allow_private=True
    )
    assert ADAPTER.parse_answer(again) is None
