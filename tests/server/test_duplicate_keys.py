"""A request body means one thing: a repeated key is invalid_request at every JSON endpoint
and in MCP arguments (as the policy loader refuses duplicate keys), and nothing is fetched."""

from __future__ import annotations

import orjson
import pytest

from tests.server.conftest import audit_records


def fetches(services) -> list[dict]:
    return [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/v1/fetch", '{"url": "http://site.example.com:{port}/page", "url": "http://10.0.0.1/"}'),
        ("/v1/fetch", '{"url": "http://site.example.com:{port}/page", "\\u0075rl": "http://10.0.0.1/"}'),
        ("/v1/fetch", '{"url": "http://site.example.com:{port}/page", "max_chars": 10, "max_chars": 20}'),
        ("/v1/search", '{"query": "a", "query": "b"}'),
        ("/v1/policy/explain", '{"url": "http://site.example.com/", "url": "http://10.0.0.1/"}'),
    ],
    ids=["url twice", "url escaped", "max_chars twice", "search", "explain"],
)
async def test_repeated_key_is_invalid_request(client, services, upstream, path: str, raw: str) -> None:
    body = raw.replace("{port}", str(upstream.port))
    response = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    answer = await response.json()
    assert response.status == 400, answer
    assert answer["error"]["code"] == "invalid_request"
    assert "more than once" in answer["error"]["message"]
    assert not [r for r in fetches(services) if r["event"]["outcome"] == "success"]


async def test_repeated_fetch_key_is_on_the_record(client, services, upstream) -> None:
    body = f'{{"url": "http://site.example.com:{upstream.port}/page", "url": "http://10.0.0.1/"}}'
    response = await client.post("/v1/fetch", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 400
    (record,) = fetches(services)
    assert record["event"]["outcome"] == "failure"
    assert record.get("error", {}).get("code", "invalid_request") == "invalid_request"


async def test_a_value_repeated_in_a_nested_object_or_list_is_found(client) -> None:
    body = '{"url": "http://site.example.com/", "extra": [{"a": 1, "a": 2}]}'
    response = await client.post("/v1/fetch", data=body, headers={"Content-Type": "application/json"})
    answer = await response.json()
    assert response.status == 400
    assert "'extra.0.a'" in answer["error"]["message"]


async def test_distinct_keys_still_work(client, upstream) -> None:
    body = orjson.dumps({"url": f"http://site.example.com:{upstream.port}/page"})
    response = await client.post("/v1/fetch", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 200


def rpc_raw(inner: str) -> str:
    return '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": ' + inner + "}"


async def test_mcp_repeated_argument_is_a_tool_error(client, services, upstream) -> None:
    site = f"http://site.example.com:{upstream.port}/page"
    raw = rpc_raw(f'{{"name": "WebFetch", "arguments": {{"url": "{site}", "url": "http://10.0.0.1/"}}}}')
    response = await client.post("/mcp", data=raw, headers={"Content-Type": "application/json"})
    reply = await response.json()
    assert response.status == 200, reply
    result = reply["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_request"
    assert "'url'" in result["structuredContent"]["error"]["message"]
    (record,) = fetches(services)
    assert record["event"]["outcome"] == "failure"


async def test_mcp_repeated_key_in_the_message_is_a_protocol_error(client) -> None:
    raw = '{"jsonrpc": "2.0", "id": 8, "method": "ping", "method": "tools/list"}'
    response = await client.post("/mcp", data=raw, headers={"Content-Type": "application/json"})
    reply = await response.json()
    assert reply["error"]["code"] == -32600
    assert "'method'" in reply["error"]["message"]
    raw = rpc_raw('{"name": "WebFetch", "name": "WebSearch", "arguments": {}}')
    response = await client.post("/mcp", data=raw, headers={"Content-Type": "application/json"})
    reply = await response.json()
    assert reply["error"]["code"] == -32600 and "'params.name'" in reply["error"]["message"]
