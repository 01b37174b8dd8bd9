"""Anthropic Messages API with the web search server tool."""

from __future__ import annotations

import orjson
import pytest

from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.providers.anthropic import ADAPTER
from gateway.search.query import SearchQuery
from gateway.search.transport import ProviderResponse
from tests.search.conftest import Reply

CHANGES = "https://docs.aiohttp.org/en/stable/changes.html"


def message(*, cited: bool = True, tool_content=None) -> dict:
    results = [
        {"type": "web_search_result", "url": CHANGES, "title": "Changelog — aiohttp 3.12",
         "encrypted_content": "EqgfCioIARgBIiQ3YTAw", "page_age": "May 26, 2025"},
        {"type": "web_search_result", "url": "https://pypi.org/project/aiohttp/",
         "title": "aiohttp · PyPI", "encrypted_content": "Eo8B", "page_age": None},
    ]  # fmt: skip
    citations = [
        {"type": "web_search_result_location", "url": CHANGES,
         "title": "Changelog — aiohttp 3.12", "encrypted_index": "Eo8BCioIAhgB",
         "cited_text": "Added support for zstd compression in the client and server ..."},
    ] if cited else []  # fmt: skip
    return {
        "id": "msg_01HqT7ZkR5uW3yXvN2bC8dEf", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "stop_reason": "end_turn",
        "content": [
            {"type": "text", "text": "I'll look that up."},
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search",
             "input": {"query": "aiohttp 3.12 release"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01",
             "content": results if tool_content is None else tool_content},
            {"type": "text", "text": "aiohttp 3.12 added zstd support.", "citations": citations},
            {"type": "text", "text": " See the changelog."},
        ],
        "usage": {"input_tokens": 6120, "output_tokens": 210,
                  "server_tool_use": {"web_search_requests": 1}},
    }  # fmt: skip


async def test_cited_sources_are_the_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, fake = await ask(ADAPTER, Reply(200, message()))
    assert [(r.url, r.title, r.snippet, r.published_at) for r in results] == [
        (CHANGES, "Changelog — aiohttp 3.12",
         "Added support for zstd compression in the client and server ...", "2025-05-26"),
    ]  # fmt: skip
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    assert sent.headers["x-api-key"] == "test-key-123456"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    body = sent.json()
    assert body["model"] == "claude-sonnet-4-5"
    assert body["tools"] == [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]


async def test_uncited_answer_falls_back_to_the_search_results(ask) -> None:  # type: ignore[no-untyped-def]
    results, _ = await ask(ADAPTER, Reply(200, message(cited=False)))
    assert [r.url for r in results] == [CHANGES, "https://pypi.org/project/aiohttp/"]


def test_answer_is_the_text_after_the_search() -> None:
    response = ProviderResponse(200, {}, orjson.dumps(message()))
    assert ADAPTER.parse_answer is not None
    assert ADAPTER.parse_answer(response) == "aiohttp 3.12 added zstd support. See the changelog."


@pytest.mark.parametrize(
    ("fields", "tool_keys"),
    [
        pytest.param({"site": "aiohttp.org", "exclude_domains": ["x.org"]},
                     {"allowed_domains": ["aiohttp.org"]}, id="allowed-wins"),
        pytest.param({"exclude_domains": ["x.org"]}, {"blocked_domains": ["x.org"]}, id="blocked"),
    ],
)  # fmt: skip
async def test_domain_filters(ask, fields, tool_keys) -> None:  # type: ignore[no-untyped-def]
    query = SearchQuery.from_fields({"query": "q", **fields})
    _, fake = await ask(ADAPTER, Reply(200, message()), query)
    tool = fake.requests[0].json()["tools"][0]
    assert {k: tool[k] for k in tool_keys} == tool_keys
    assert not ({"allowed_domains", "blocked_domains"} - set(tool_keys)) & set(tool)


def api_error(kind: str, text: str, **extra) -> dict:
    return {"type": "error", "error": {"type": kind, "message": text, **extra},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "error_class", "retry_after"),
    [
        pytest.param(Reply(200, message(cited=False, tool_content={"type": "web_search_tool_result_error",
                                                      "error_code": "too_many_requests"})),
                     ErrorClass.RATE_LIMITED, None, id="tool-rate-limited"),
        pytest.param(Reply(200, message(cited=False, tool_content={
            "type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"})),
                     ErrorClass.SERVER_ERROR, None, id="tool-max-uses"),
        pytest.param(Reply(401, api_error("authentication_error", "invalid x-api-key")),
                     ErrorClass.HTTP_4XX, None, id="bad-key"),
        pytest.param(Reply(429, api_error("rate_limit_error", "slow down"), {"retry-after": "1"}),
                     ErrorClass.RATE_LIMITED, 1.0, id="rate-limit"),
        pytest.param(Reply(429, api_error("rate_limit_error", "spend limit",
                                          details={"error_code": "enforced_spend_limit_reached"})),
                     ErrorClass.RATE_LIMITED, 600.0, id="spend-limit"),
        pytest.param(Reply(529, api_error("overloaded_error", "Overloaded")),
                     ErrorClass.SERVER_ERROR, None, id="overloaded"),
    ],
)  # fmt: skip
async def test_errors(ask, reply, error_class, retry_after) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProviderError) as caught:
        await ask(ADAPTER, reply)
    assert caught.value.error_class is error_class
    assert caught.value.retry_after == retry_after
