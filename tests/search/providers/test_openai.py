"""OpenAI Responses API with web_search: citations as results, the answer, errors."""

from __future__ import annotations

import orjson
import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.openai import ADAPTER
from gateway.search.query import SearchQuery
from gateway.search.transport import ProviderResponse
from tests.search.conftest import Reply

TEXT = (
    "aiohttp 3.12 added zstd decompression "
    "([docs.aiohttp.org](https://docs.aiohttp.org/en/stable/changes.html?utm_source=openai)). "
    "It also dropped Python 3.8 ([pypi.org](https://pypi.org/project/aiohttp/))."
)


def response_body(text: str = TEXT, *, cited: bool = True) -> dict:
    first = text.find("([docs")
    second = text.find("([pypi")
    annotations = [
        {"type": "url_citation", "start_index": first, "end_index": first + 80,
         "url": "https://docs.aiohttp.org/en/stable/changes.html?utm_source=openai",
         "title": "Changelog — aiohttp"},
        {"type": "url_citation", "start_index": second, "end_index": second + 40,
         "url": "https://pypi.org/project/aiohttp/", "title": "aiohttp · PyPI"},
    ] if cited else []  # fmt: skip
    return {
        "id": "resp_68af0c1d2e3f4a5b", "object": "response", "status": "completed",
        "model": "gpt-5-2025-08-07",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "web_search_call", "id": "ws_1", "status": "completed",
             "action": {"type": "search", "query": "aiohttp 3.12", "queries": ["aiohttp 3.12"],
                        "sources": [{"type": "url", "url": "https://github.com/aio-libs/aiohttp"},
                                    {"type": "api", "name": "oai-weather"}]}},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "logprobs": [], "text": text,
                          "annotations": annotations}]},
        ],
        "usage": {"input_tokens": 8210, "output_tokens": 154, "total_tokens": 8364},
    }  # fmt: skip


async def test_citations_are_the_results_and_the_text_the_answer(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, response_body()))
    assert [(r.url, r.title, r.snippet) for r in results] == [
        ("https://docs.aiohttp.org/en/stable/changes.html?utm_source=openai",
         "Changelog — aiohttp", "aiohttp 3.12 added zstd decompression"),
        ("https://pypi.org/project/aiohttp/", "aiohttp · PyPI", "It also dropped Python 3.8"),
    ]  # fmt: skip
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["Authorization"] == "Bearer test-key-123456"
    body = sent.json()
    assert body["model"] == "gpt-5-mini" and body["tools"] == [{"type": "web_search"}]
    assert body["include"] == ["web_search_call.action.sources"] and body["store"] is False
    assert "Query: test" in body["input"]


async def test_without_citations_the_sources_are_the_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, response_body("No citations here.", cited=False)))
    assert [r.url for r in results] == ["https://github.com/aio-libs/aiohttp"]


def test_answer_is_the_output_text() -> None:
    response = ProviderResponse(200, {}, orjson.dumps(response_body()))
    assert ADAPTER.parse_answer is not None and ADAPTER.parse_answer(response) == TEXT


async def test_domain_filters_and_prompt(ask) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields(
        {"query": "q", "include_domains": ["aiohttp.org"], "exclude_domains": ["spam.example"],
         "freshness": "week", "region": "de"}
    )  # fmt: skip
    _, fake = await ask(ADAPTER, Reply(200, response_body()), query)
    body = fake.requests[0].json()
    assert body["tools"][0]["filters"] == {"allowed_domains": ["aiohttp.org"]}
    assert body["tools"][0]["user_location"] == {"type": "approximate", "country": "DE"}
    assert "Do not use pages from: spam.example." in body["input"]
    assert "the last week" in body["input"]
    assert ADAPTER.applies_time_filter(query) is False


def error(code: str | None, message: str, kind: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@pytest.mark.parametrize(
    ("reply", "error_class", "retry_after"),
    [
        pytest.param(Reply(401, error("invalid_api_key", "Incorrect API key provided")),
                     ErrorClass.HTTP_4XX, None, id="bad-key"),
        pytest.param(Reply(429, error("rate_limit_exceeded", "Rate limit reached", "requests"),
                           {"retry-after-ms": "120"}),
                     ErrorClass.RATE_LIMITED, 0.12, id="rate-limit-ms"),
        pytest.param(Reply(429, error("rate_limit_exceeded", "slow down"), {"retry-after": "2"}),
                     ErrorClass.RATE_LIMITED, 2.0, id="rate-limit"),
        pytest.param(Reply(429, error("insufficient_quota", "You exceeded your quota")),
                     ErrorClass.RATE_LIMITED, 600.0, id="quota"),
        pytest.param(Reply(400, error(None, "Tool web_search is not supported with this model")),
                     ErrorClass.HTTP_4XX, None, id="unsupported-model"),
        pytest.param(Reply(500, error(None, "server error", "server_error")),
                     ErrorClass.SERVER_ERROR, None, id="500"),
        pytest.param(Reply(200, {"status": "failed", "output": [],
                                 "error": {"code": "server_error", "message": "boom"}}),
                     ErrorClass.SERVER_ERROR, None, id="failed-response"),
    ],
)  # fmt: skip
async def test_errors(ask, reply, error_class, retry_after) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert caught.value.error_class is error_class
    assert caught.value.retry_after == retry_after
