from __future__ import annotations

import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.bocha import ADAPTER
from gateway.search.query import SearchQuery
from tests.search.conftest import Reply

OK = {
    "code": 200, "log_id": "a1b2c3d4e5f60718", "msg": None,
    "data": {"_type": "SearchResponse", "queryContext": {"originalQuery": "杭州 亚运场馆 再利用"},
        "webPages": {"webSearchUrl": "", "totalEstimatedMatches": 120345, "someResultsRemoved": False,
            "value": [
                {"id": None, "name": "亚运场馆赛后利用情况通报", "url": "https://www.example.cn/news/1234.html",
                 "displayUrl": "https://www.example.cn/news/1234.html", "snippet": "多数亚运场馆已向市民开放……",
                 "summary": "市体育局介绍，……", "siteName": "示例新闻网",
                 "dateLastCrawled": "2025-02-18T08:30:00Z", "cachedPageUrl": None},
                {"name": "Newer", "url": "https://b.example.cn/", "snippet": "s",
                 "datePublished": "2025-03-01T08:00:00+08:00"},
            ]},
        "images": {"id": None, "readLink": None, "webSearchUrl": None, "value": []}},
}  # fmt: skip


async def test_parses_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, OK))
    assert [(r.title, r.snippet, r.published_at) for r in results] == [
        ("亚运场馆赛后利用情况通报", "市体育局介绍，……", "2025-02-18T08:30:00Z"),
        ("Newer", "s", "2025-03-01T00:00:00Z"),
    ]
    assert fake.requests[0].headers["Authorization"] == "Bearer test-key-123456"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, {"freshness": "noLimit"}, id="no-filter"),
        pytest.param({"freshness": "year"}, {"freshness": "oneYear"}, id="freshness"),
        pytest.param({"time_range": "2026-01-01..2026-12-31"},
                     {"freshness": "2026-01-01..2026-12-31"}, id="range"),
        pytest.param({"include_domains": ["a.cn", "b.cn"], "exclude_domains": ["c.cn"]},
                     {"include": "a.cn|b.cn", "exclude": "c.cn"}, id="domains"),
    ],
)  # fmt: skip
async def test_request_mapping(ask, fields: dict, expected: dict) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields({"query": "亚运", "max_results": 8, **fields})
    _, fake = await ask(ADAPTER, Reply(200, OK), query)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/web-search")
    body = sent.json()
    assert (body["query"], body["count"]) == ("亚运", 8)
    assert {k: body[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("reply", "error_class", "retry_after", "words"),
    [
        pytest.param(Reply(200, {"code": "401", "message": "Invalid API KEY", "log_id": "x"}),
                     ErrorClass.HTTP_4XX, None, "Invalid API KEY", id="401-inside-200"),
        pytest.param(Reply(200, {"code": 429, "msg": "You have reached the request limit"}),
                     ErrorClass.RATE_LIMITED, None, "request limit", id="429-inside-200"),
        pytest.param(Reply(403, {"code": "403", "message": "You do not have enough money"}),
                     ErrorClass.RATE_LIMITED, 600.0, "balance spent", id="403-money"),
        pytest.param(Reply(400, {"code": "400", "message": "Missing parameter query"}),
                     ErrorClass.HTTP_4XX, None, "Missing parameter", id="400"),
        pytest.param(Reply(200, {"code": "500", "message": "internal"}),
                     ErrorClass.SERVER_ERROR, None, "internal", id="500-inside-200"),
        pytest.param(Reply(502, "upstream down"), ErrorClass.SERVER_ERROR, None, "upstream down",
                     id="502-text"),
        pytest.param(Reply(200, b"\xff\xfe garbage"), ErrorClass.INVALID_RESPONSE, None,
                     "malformed JSON", id="garbage"),
    ],
)  # fmt: skip
async def test_error_shapes(  # type: ignore[no-untyped-def]
    ask, reply: Reply, error_class: ErrorClass, retry_after: float | None, words: str
) -> None:
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert (caught.value.error_class, caught.value.retry_after) == (error_class, retry_after)
    assert words in caught.value.message


async def test_no_web_pages_is_no_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, {"code": 200, "data": {"_type": "SearchResponse"}}))
    assert results == []


async def test_a_code_of_non_ascii_digits_is_no_code(ask) -> None:  # type: ignore[no-untyped-def]
    body = {"code": "\xb2", "data": {"_type": "SearchResponse"}}
    results, _ = await ask(ADAPTER, Reply(200, body))
    assert results == []


async def test_the_estimated_total_is_read(upstream, transport) -> None:  # type: ignore[no-untyped-def]
    fake = await upstream()
    fake.queue(Reply(200, OK))
    response = await transport.send(
        ADAPTER.build_request(SearchQuery("q"), fake.base_url, "k"), timeout=5, allow_private=True
    )
    assert ADAPTER.parse_total is not None and ADAPTER.parse_total(response) == 120345
