"""Tool calls that used to end without their audit record (every call is on
record before its answer, and a record that cannot be written refuses): an MCP `tools/call`
refused by the client's limits, a tool that fails with an unexpected exception, and the
pages of a Research call cut off at the end of the shutdown grace."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
from aiohttp import web

from gateway.server.app import make_app
from gateway.server.drain import CUT_OFF
from gateway.tools.context import CallContext
from gateway.tools.registry import ToolSpec
from tests.server.conftest import audit_records
from tests.tools.searchgateway import client_policy, token

# --- 1. MCP tools/call refused by the client's limits -------------------------------------


SLOW = {"Authorization": "Bearer tok-slow", "Accept": "application/json"}
URL = "https://a.example.com/x"


def call(tool: str, arguments: Any, message_id: Any = 1) -> dict[str, Any]:
    message: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    if message_id is not None:
        message["id"] = message_id
    return message


PING = {"jsonrpc": "2.0", "id": 9, "method": "ping"}

# (id, body, the records expected: (action, url.original or search.query))
MCP_REFUSED: list[tuple[str, Any, list[tuple[str, str | None]]]] = [
    ("fetch", call("WebFetch", {"url": URL}), [("WebFetch", URL)]),
    ("search", call("WebSearch", {"query": "q"}), [("WebSearch", "q")]),
    (
        "no arguments",
        {**call("WebFetch", None), "params": {"name": "WebFetch"}},
        [("WebFetch", None)],
    ),
    ("bad arguments", call("WebFetch", {"url": 5}), [("WebFetch", None)]),
    (
        "batch",
        [call("WebFetch", {"url": URL}, 1), PING, call("WebSearch", {"query": "q"}, 2)],
        [("WebFetch", URL), ("WebSearch", "q")],
    ),
    ("ping", PING, []),
    ("notification", call("WebFetch", {"url": URL}, None), []),
    ("unknown tool", call("NoSuchTool", {"url": URL}), []),
    ("name not a string", {**call("WebFetch", {}), "params": {"name": 5}}, []),
    ("arguments not an object", call("WebFetch", [URL]), []),
    ("params not an object", {**call("WebFetch", {}), "params": [1]}, []),
    ("not json-rpc 2.0", {**call("WebFetch", {"url": URL}), "jsonrpc": "1.0"}, []),
    ("batch of junk", [1, "x", None], []),
    ("batch over the limit", [call("WebFetch", {"url": URL}, n) for n in range(33)], []),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in MCP_REFUSED], ids=[c[0] for c in MCP_REFUSED]
)
async def test_rate_limited_mcp_tool_call_is_recorded(limited, body, expected) -> None:
    client, services = limited
    first = await client.post("/mcp", json=PING, headers=SLOW)
    assert first.status == 200
    before = len(audit_records(services))
    response = await client.post("/mcp", data=orjson.dumps(body), headers=SLOW)
    answer = await response.json()
    # The answer is unchanged: the whole POST is refused in JSON-RPC form.
    assert response.status == 429 and response.headers["Retry-After"]
    assert answer["error"]["data"]["error"]["code"] == "rate_limited"
    new = audit_records(services)[before:]
    assert len(new) == len(expected), new
    for record, (action, asked) in zip(new, expected, strict=True):
        assert record["event"]["action"] == action
        assert (record["event"]["outcome"], record["event"]["type"]) == ("failure", ["error"])
        assert record["error"]["code"] == "rate_limited"
        assert record["client"]["id"] == "slow-agent"
        assert record["trace"]["id"] == response.headers["X-Request-Id"]
        if action == "WebSearch":
            assert record["search"]["query"] == asked
        else:
            assert record.get("url", {}).get("original") == asked


@pytest.mark.parametrize(
    "raw", [b"{not json", b"", b'"tools/call"'], ids=["malformed", "empty", "a string"]
)
async def test_rate_limited_mcp_body_that_is_not_json_rpc_has_no_tool_record(limited, raw) -> None:
    client, services = limited
    await client.post("/mcp", json=PING, headers=SLOW)
    before = len(audit_records(services))
    response = await client.post("/mcp", data=raw, headers=SLOW)
    assert response.status == 429
    assert audit_records(services)[before:] == []


async def test_rate_limited_mcp_body_over_the_limit_is_still_429(limited) -> None:
    client, services = limited
    await client.post("/mcp", json=PING, headers=SLOW)
    before = len(audit_records(services))
    body = call("WebFetch", {"url": URL + "y" * 4000})
    response = await client.post("/mcp", data=orjson.dumps(body), headers=SLOW)
    assert response.status == 429
    assert (await response.json())["error"]["data"]["error"]["code"] == "rate_limited"
    assert audit_records(services)[before:] == []


async def test_rate_limited_mcp_tool_call_fails_closed(limited) -> None:
    client, services = limited
    await client.post("/mcp", json=PING, headers=SLOW)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, services.audit._fd)  # the disk is now "full" under the open log
        response = await client.post("/mcp", json=call("WebFetch", {"url": URL}), headers=SLOW)
    finally:
        os.close(full)
    answer = await response.json()
    assert response.status == 503
    assert answer["error"]["data"]["error"]["code"] == "unavailable"


# --- 2. A tool call that fails with an unexpected exception -------------------------------


def broken_spec(path: str = "/v1/broken") -> ToolSpec:
    async def explode(ctx: CallContext, args: Mapping[str, Any]) -> dict[str, Any]:
        raise RuntimeError("a bug after the fetch")

    return ToolSpec(
        "Broken",
        path,
        "A tool whose every call fails with a bug.",
        {"type": "object", "properties": {"url": {"type": "string"}}},
        explode,
        lambda body: "never rendered",
    )


@pytest.fixture
async def broken(services, aiohttp_client):
    services.tools.add(broken_spec())
    return await aiohttp_client(make_app(services))


async def test_unexpected_failure_is_an_internal_error_on_record(broken, services) -> None:
    before = len(audit_records(services))
    response = await broken.post("/v1/broken", json={"url": URL})
    answer = await response.json()
    assert response.status == 500
    error = answer["error"]
    assert error["code"] == "internal_error"
    assert error["request_id"] == response.headers["X-Request-Id"]
    assert (error["reason"], error["rule"]) == (None, None)
    assert "a bug after the fetch" not in error["message"]  # the log has it, not the agent
    (record,) = audit_records(services)[before:]
    assert record["event"]["action"] == "Broken"
    assert (record["event"]["outcome"], record["event"]["type"]) == ("failure", ["error"])
    assert record["error"]["code"] == "internal_error"
    assert record["url"]["original"] == URL
    assert record["trace"]["id"] == response.headers["X-Request-Id"]


async def test_unexpected_failure_over_mcp_is_a_tool_error_on_record(broken, services) -> None:
    before = len(audit_records(services))
    response = await broken.post(
        "/mcp", json=call("Broken", {"url": URL}, 4), headers={"Accept": "application/json"}
    )
    answer = await response.json()
    assert response.status == 200 and answer["id"] == 4, answer
    result = answer["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "internal_error"
    (record,) = audit_records(services)[before:]
    assert (record["event"]["action"], record["error"]["code"]) == ("Broken", "internal_error")
    assert record["trace"]["id"] == result["structuredContent"]["error"]["request_id"]


async def test_unexpected_failure_fails_closed(broken, services) -> None:
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, services.audit._fd)
        response = await broken.post("/v1/broken", json={"url": URL})
    finally:
        os.close(full)
    answer = await response.json()
    assert response.status == 503 and answer["error"]["code"] == "unavailable"


# --- 3. Research pages cut off at the end of the shutdown grace ---------------------------


@pytest.fixture
async def stalling(aiohttp_server):
    """`/page` answers at once; `/stall` sends nothing until the test ends. `stalled` is set
    once two `/stall` requests have arrived."""
    state: dict[str, Any] = {"count": 0, "stalled": asyncio.Event(), "release": asyncio.Event()}

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<h1>Fast</h1><p>a page</p>", content_type="text/html")

    async def stall(request: web.Request) -> web.Response:
        state["count"] += 1
        if state["count"] >= 2:
            state["stalled"].set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state["release"].wait(), 10)
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/stall", stall)
    server = await aiohttp_server(app, host="127.0.0.1")
    server.state = state
    yield server
    state["release"].set()


async def until(condition, seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


def research_message(body: Mapping[str, Any]) -> dict[str, Any]:
    return call("Research", dict(body), 3)


@pytest.mark.parametrize("transport", ["api", "mcp"])
async def test_research_pages_cut_off_by_the_grace_are_recorded(
    stalling, search_gateways, transport
) -> None:
    port = stalling.port
    fast = f"http://site.example.com:{port}/page"
    slow = [f"http://other.example.com:{port}/stall", f"http://site.example.com:{port}/stall"]
    gateway = await search_gateways(
        site_port=port,
        policies={"agent": client_policy(port, "agent-policy")},
        hits=[("Fast", fast, "s"), ("Slow", slow[0], "s"), ("Slow too", slow[1], "s")],
    )
    services = gateway.services
    headers = {"Authorization": f"Bearer {token('agent')}", "Accept": "application/json"}
    body = {"query": "research", "fetch_top_n": 3}
    if transport == "api":
        sent = gateway.client.post("/v1/research", json=body, headers=headers)
    else:
        sent = gateway.client.post("/mcp", json=research_message(body), headers=headers)
    request = asyncio.ensure_future(sent)

    def fetches() -> list[dict]:
        return [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]

    await asyncio.wait_for(stalling.state["stalled"].wait(), 10)
    await until(lambda: len(fetches()) == 1)  # the fast page is on record
    assert gateway.client.server.app[CUT_OFF].cut() == 1
    response = await asyncio.wait_for(request, 10)
    answer = await response.json()
    if transport == "api":
        assert response.status == 503 and answer["error"]["code"] == "unavailable", answer
        error = answer["error"]
    else:
        assert response.status == 200 and answer["result"]["isError"] is True, answer
        error = answer["result"]["structuredContent"]["error"]
    assert "shutdown_grace" in error["message"]
    written = audit_records(services)
    calls = [r for r in written if r.get("trace", {}).get("id") == error["request_id"]]
    actions = [(r["event"]["action"], r["event"]["outcome"]) for r in calls]
    # The search, the page that finished, each page cut off, then the call's own end.
    assert actions == [
        ("Research", "success"),
        ("WebFetch", "success"),
        ("WebFetch", "failure"),
        ("WebFetch", "failure"),
        ("Research", "failure"),
    ], actions
    assert calls[1]["url"]["original"] == fast
    cut = calls[2:4]
    assert sorted(r["url"]["original"] for r in cut) == sorted(slow)
    for record in cut:
        assert record["error"]["code"] == "unavailable"
        assert "shutdown_grace" in record["error"]["message"]
        assert record["event"]["type"] == ["error"]
        assert record["policy"]["decision"] == "allow"
        assert record["policy"]["rule"] is not None  # the page's own decision
    assert calls[4]["error"]["code"] == "unavailable"
