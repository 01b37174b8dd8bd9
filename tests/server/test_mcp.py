"""POST /mcp: the official MCP SDK client against a real gateway port, and raw JSON-RPC."""

from __future__ import annotations

import hashlib

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gateway.config import ClientConfig
from gateway.provenance.markers import unwrap
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.server.mcp import PROTOCOL_VERSIONS
from tests.conftest import loopback_policy
from tests.server.conftest import audit_records

TOKEN = "mcp-test-token-0123456789"


@pytest.fixture
async def mcp_url(services, aiohttp_server):
    server = await aiohttp_server(make_app(services), host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}/mcp"


class Session:
    """The SDK's Client over Streamable HTTP, with an optional bearer token."""

    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.http = httpx2.AsyncClient(headers=headers)
        self.client = Client(streamable_http_client(url, http_client=self.http))

    async def __aenter__(self) -> Client:
        await self.http.__aenter__()
        return await self.client.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        await self.client.__aexit__(*exc)  # type: ignore[arg-type]
        await self.http.__aexit__(*exc)  # type: ignore[arg-type]


async def test_sdk_lists_the_registry_tools_the_policy_enables(mcp_url, services) -> None:
    async with Session(mcp_url) as client:
        assert client.session.protocol_version in PROTOCOL_VERSIONS
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    # The loopback policy keeps the defaults: XSearch off, Research on with both parents.
    assert set(listed) == {"WebFetch", "WebSearch", "Research", "Status"}
    for name, tool in listed.items():
        if name == "Status":
            continue  # not a registry tool: GET /v1/status over MCP
        spec = services.tools.get(name)
        assert tool.input_schema == spec.input_schema
        assert tool.description == spec.description


async def test_sdk_calls_webfetch_like_the_http_api(mcp_url, upstream, client, services) -> None:
    url = f"http://site.example.com:{upstream.port}/page"
    async with Session(mcp_url) as session:
        result = await session.call_tool("WebFetch", {"url": url})
    assert result.is_error is False
    body = result.structured_content
    http_body = await (await client.post("/v1/fetch", json={"url": url})).json()
    assert set(body) == set(http_body)
    assert set(body["envelope"]) == set(http_body["envelope"])
    stable = ("final_url", "status", "content_type", "body_sha256", "content_sha256", "policy")
    for key in stable:
        assert body["envelope"][key] == http_body["envelope"][key]
    env = body["envelope"]
    text = unwrap(body["content"], env["marker"])
    assert hashlib.sha256(text.encode()).hexdigest() == env["content_sha256"]
    [item] = result.content
    assert item.type == "text"
    assert item.text.startswith("[gateway provenance: written by the gateway")
    assert f"envelope={env['id']}" in item.text
    assert item.text.endswith(body["content"])
    records = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
    assert [r["event"]["id"] for r in records] == [env["id"], http_body["envelope"]["id"]]


REFUSALS = [
    pytest.param(
        {"url": "http://blocked.example.com/"},
        "policy_denied",
        "domain_denied",
        "domains.deny[0]",
        id="denied-domain",
    ),
    pytest.param(
        {"url": "http://elsewhere.org/"},
        "policy_denied",
        "domain_not_allowed",
        "default",
        id="not-allowed",
    ),
    pytest.param({"url": 5}, "invalid_request", None, None, id="wrong-type"),
    pytest.param(
        {"uri": "http://site.example.com/"}, "invalid_request", None, None, id="unknown-field"
    ),
    pytest.param(
        {"url": "http://[::1"}, "invalid_request", "invalid_url", "url", id="unparsable-url"
    ),
]


@pytest.mark.parametrize(("arguments", "code", "reason", "rule"), REFUSALS)
async def test_refusals_and_bad_arguments_are_tool_errors(
    mcp_url, arguments, code, reason, rule
) -> None:
    async with Session(mcp_url) as session:
        result = await session.call_tool("WebFetch", arguments)
    assert result.is_error is True
    error = result.structured_content["error"]
    assert (error["code"], error["reason"], error["rule"]) == (code, reason, rule)
    assert error["message"]
    [item] = result.content
    assert item.text.startswith(f"error {code}")
    assert error["message"] in item.text


async def test_tool_disabled_by_policy_is_hidden_and_refused(
    upstream, write_policy, make_config, aiohttp_server
) -> None:
    extra = "tools:\n  WebSearch: {enabled: false}\n  XSearch: {enabled: true}\n"
    services = Services(make_config(write_policy(loopback_policy(upstream.port, extra))))
    services.open()
    try:
        server = await aiohttp_server(make_app(services), host="127.0.0.1")
        async with Session(f"http://127.0.0.1:{server.port}/mcp") as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert names == {"WebFetch", "XSearch", "Status"}
            result = await session.call_tool("WebSearch", {"query": "x"})
        assert result.is_error is True
        error = result.structured_content["error"]
        assert error["code"] == "tool_disabled"
        assert error["rule"] == "tools.WebSearch.enabled"
    finally:
        await services.close()


@pytest.fixture
async def authed(upstream, write_policy, make_config, aiohttp_server, aiohttp_client):
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        clients=(ClientConfig(id="agent-1", token_sha256=digest),),
    )
    services = Services(config)
    services.open()
    server = await aiohttp_server(make_app(services), host="127.0.0.1")
    yield f"http://127.0.0.1:{server.port}/mcp", await aiohttp_client(server)
    await services.close()


async def test_bearer_tokens_guard_mcp(authed, upstream) -> None:
    url, raw = authed
    async with Session(url, TOKEN) as session:
        result = await session.call_tool(
            "WebFetch", {"url": f"http://site.example.com:{upstream.port}/text"}
        )
    assert result.is_error is False
    assert result.structured_content["envelope"]["client"] == "agent-1"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = await raw.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers
        )
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        body = await response.json()
        assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32001
        assert body["error"]["data"]["error"]["code"] == "unauthorized"


def rpc(method: str, id_: object = 1, **params: object) -> dict:
    message: dict = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params:
        message["params"] = params
    return message


RAW_CASES = [
    pytest.param(b"{not json", {}, 400, -32700, id="parse-error"),
    pytest.param(b'"a string"', {}, 400, -32600, id="not-an-object"),
    pytest.param(b"[]", {}, 400, -32600, id="empty-batch"),
    pytest.param(orjson.dumps({"id": 1, "method": "ping"}), {}, 200, -32600, id="no-jsonrpc"),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": 7}),
        {},
        200,
        -32600,
        id="method-not-string",
    ),
    pytest.param(
        orjson.dumps({"jsonrpc": "2.0", "id": True, "method": "ping"}),
        {},
        400,
        -32600,
        id="bool-id",
    ),
    pytest.param(orjson.dumps(rpc("resources/list")), {}, 200, -32601, id="unknown-method"),
    pytest.param(
        orjson.dumps(rpc("server/discover")),
        {"MCP-Protocol-Version": "2026-07-28"},
        200,
        -32601,
        id="discover-probe",
    ),
    pytest.param(
        orjson.dumps({**rpc("tools/list"), "params": [1]}), {}, 200, -32602, id="params-not-object"
    ),
    pytest.param(orjson.dumps(rpc("tools/call", name="Nope")), {}, 200, -32602, id="unknown-tool"),
    pytest.param(
        orjson.dumps(rpc("tools/call", name="WebFetch", arguments=[1])),
        {},
        200,
        -32602,
        id="arguments-not-object",
    ),
    pytest.param(orjson.dumps(rpc("tools/call", arguments={})), {}, 200, -32602, id="no-tool-name"),
    pytest.param(orjson.dumps(rpc("initialize")), {}, 200, -32602, id="initialize-no-version"),
    pytest.param(
        orjson.dumps(rpc("ping")),
        {"MCP-Protocol-Version": "1999-01-01"},
        400,
        -32600,
        id="unsupported-version-header",
    ),
    pytest.param(
        orjson.dumps([rpc("ping")]),
        {"MCP-Protocol-Version": "2025-06-18"},
        400,
        -32600,
        id="batch-after-2025-03-26",
    ),
]


@pytest.mark.parametrize(("raw", "headers", "status", "code"), RAW_CASES)
async def test_malformed_messages_get_jsonrpc_errors(client, raw, headers, status, code) -> None:
    response = await client.post(
        "/mcp", data=raw, headers={"Content-Type": "application/json", **headers}
    )
    assert response.status == status
    body = await response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code
    assert body["error"]["message"]


@pytest.mark.parametrize(
    ("offered", "agreed"),
    [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", PROTOCOL_VERSIONS[0]),
    ],
)
async def test_initialize_negotiates_the_version(client, offered, agreed) -> None:
    message = rpc(
        "initialize",
        "init-1",
        protocolVersion=offered,
        capabilities={},
        clientInfo={"name": "raw", "version": "0"},
    )
    response = await client.post("/mcp", json=message)
    body = await response.json()
    assert response.status == 200 and body["id"] == "init-1"
    result = body["result"]
    assert result["protocolVersion"] == agreed
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "agent-egress-gateway"
    assert "Mcp-Session-Id" not in response.headers  # stateless: any replica answers


async def test_notifications_are_accepted_without_a_body(client) -> None:
    response = await client.post(
        "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert response.status == 202 and await response.read() == b""


async def test_batches_where_the_version_has_them(client) -> None:
    batch = [
        rpc("ping", 1),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        rpc("nope", 2),
    ]
    response = await client.post("/mcp", json=batch, headers={"MCP-Protocol-Version": "2025-03-26"})
    body = await response.json()
    assert response.status == 200
    assert body[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert body[1]["id"] == 2 and body[1]["error"]["code"] == -32601


async def test_sse_when_the_client_accepts_only_event_streams(client) -> None:
    response = await client.post(
        "/mcp", json=rpc("ping", 9), headers={"Accept": "text/event-stream"}
    )
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    text = await response.text()
    assert text.startswith("event: message\ndata: ")
    assert orjson.loads(text.split("data: ", 1)[1]) == {"jsonrpc": "2.0", "id": 9, "result": {}}


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_no_stream_and_no_sessions(client, method) -> None:
    response = await client.request(method, "/mcp")
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    assert (await response.json())["jsonrpc"] == "2.0"


GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("Nope", id="plain"),
        pytest.param("Web\x00Fetch\n", id="controls"),
        pytest.param("x" * 500, id="long"),
    ],
)
async def test_unknown_tool_is_the_specs_protocol_error_and_not_a_tool_call(
    client, services, name: str
) -> None:
    before = len(audit_records(services))
    response = await client.post("/mcp", json=rpc("tools/call", name=name, arguments={}))
    assert response.status == 200
    body = await response.json()
    error = body["error"]
    assert error["code"] == -32602  # MCP 2025-11-25, server/tools, Error Handling
    assert error["message"].startswith("Unknown tool: ")
    assert "tools for this caller: WebFetch, WebSearch, Research" in error["message"]
    # No tool was called: no record (the audit log lists no action for a protocol error).
    assert audit_records(services)[before:] == []


async def test_sdk_sees_an_unknown_tool_as_a_protocol_error(mcp_url, services) -> None:
    async with Session(mcp_url) as session:
        with pytest.raises(MCPError) as raised:
            await session.call_tool("Nope", {})
    assert raised.value.code == -32602


async def test_status_tool_returns_what_v1_status_returns(mcp_url, client) -> None:
    async with Session(mcp_url) as session:
        result = await session.call_tool("Status", {})
        refused = await session.call_tool("Status", {"verbose": True})
    assert result.is_error is False
    body = result.structured_content
    response = await client.get("/v1/status")
    expected = await response.json()
    assert set(body) == set(expected)
    for key in ("version", "instance", "client", "policy", "search"):
        assert body[key] == expected[key], key
    text = result.content[0].text
    assert f"policy {expected['policy']['name']}" in text
    for provider in expected["search"]["providers"]:
        assert f"search provider {provider['id']} ({provider['kind']})" in text
    assert refused.is_error is True
    assert refused.structured_content["error"]["code"] == "invalid_request"


async def test_instructions_say_how_to_search_well(client) -> None:
    response = await client.post("/mcp", json=rpc("initialize", protocolVersion="2025-06-18"))
    instructions = (await response.json())["result"]["instructions"]
    for advice in ("queries", "Check dates", "primary sources", "not proof", "cite"):
        assert advice in instructions
