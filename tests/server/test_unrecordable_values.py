"""Class: an upstream (or an agent) decides what goes unrecorded. Raw hostile upstreams on
loopback put bytes that are not UTF-8, encoded lone surrogates, NUL and over-long values in
every field of a response head (the status line's reason, Content-Type, Content-Encoding,
Location, any other header); WebFetch, MCP, Research and the forward proxy each still
answer with JSON (or the proxy's refusal) and write the request's record, and the log
verifies. Agent-side bytes (a credential, a proxy request line) are on record the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.audit.verify import verify_files
from gateway.config import ClientConfig
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy
from tests.server.conftest import audit_records, policies_for
from tests.server.proxy.env import parse_head, raw_exchange, start_env
from tests.upstream import ScriptedUpstream

PAYLOADS = {
    "not-utf-8": b"\xff\xfe\x80",
    "lone-surrogate": b"\xed\xa0\x80",  # U+D800 as CESU-8 would write it
    "nul": b"a\x00b",
    "over-long": b"\xff" * 12_000,  # under one field line's limit, far over any record's need
}


def hostile_reply(field: str, payload: bytes) -> bytes:
    """A response whose `field` carries `payload`."""
    if field == "reason":
        return (
            b"HTTP/1.1 200 O"
            + payload
            + b"K\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"
        )
    if field == "location":
        return b"HTTP/1.1 302 Found\r\nLocation: /next" + payload + b"\r\nContent-Length: 0\r\n\r\n"
    value = {"content-type": b"text/plain; x=", "content-encoding": b"gzip"}.get(field, b"v")
    head = b"HTTP/1.1 200 OK\r\n"
    if field != "content-type":
        head += b"Content-Type: text/plain\r\n"
    return head + field.encode() + b": " + value + payload + b"\r\nContent-Length: 2\r\n\r\nhi"


FIELDS = ["reason", "content-type", "content-encoding", "location", "x-anything", "server"]
CASES = [(f, p) for f in FIELDS for p in PAYLOADS]
IDS = [f"{f}-{p}" for f, p in CASES]


@pytest.fixture
async def hostile() -> AsyncIterator[ScriptedUpstream]:
    script = ScriptedUpstream([b""], repeat=True)
    await script.start()
    yield script
    await script.close()


async def gateway_for(port, write_policy, make_config, aiohttp_client, **config):
    services = Services(make_config(write_policy(loopback_policy(port)), **config))
    services.open()
    return services, await aiohttp_client(make_app(services))


def assert_log_verifies(services: Services) -> None:
    assert [result.valid for result in verify_files([services.audit.path])] == [True]
    assert services.audit.status()["healthy"] is True


@pytest.mark.parametrize(("field", "payload"), CASES, ids=IDS)
async def test_webfetch_records_every_hostile_head(
    hostile, write_policy, make_config, aiohttp_client, field, payload
) -> None:
    hostile.replies = [hostile_reply(field, PAYLOADS[payload])]
    port = int(hostile.server.sockets[0].getsockname()[1])
    services, client = await gateway_for(port, write_policy, make_config, aiohttp_client)
    try:
        response = await client.post("/v1/fetch", json={"url": f"http://site.example.com:{port}/x"})
        body = orjson.loads(await response.read())  # an answer, never a 500 or a broken body
        assert response.status in (200, 403, 502), body
        assert hostile.requests, "the upstream was asked"
        records = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
        assert len(records) == 1
        (record,) = records
        assert record["trace"]["id"] == response.headers["X-Request-Id"]
        if response.status != 200:
            assert record["error"]["code"] == body["error"]["code"]
            assert record["error"]["message"] == body["error"]["message"][:500]
        assert_log_verifies(services)
    finally:
        await services.close()


@pytest.mark.parametrize("payload", list(PAYLOADS))
async def test_mcp_webfetch_records_a_hostile_content_type(
    hostile, write_policy, make_config, aiohttp_client, payload
) -> None:
    hostile.replies = [
        hostile_reply("content-type", PAYLOADS[payload]).replace(b"text/plain; x=", b"image/")
    ]
    port = int(hostile.server.sockets[0].getsockname()[1])
    services, client = await gateway_for(port, write_policy, make_config, aiohttp_client)
    try:
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "WebFetch",
                "arguments": {"url": f"http://site.example.com:{port}/"},
            },
        }
        response = await client.post("/mcp", json=call, headers={"Accept": "application/json"})
        answer = orjson.loads(await response.read())
        assert response.status == 200 and answer["result"]["isError"] is True
        error = answer["result"]["structuredContent"]["error"]
        (record,) = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
        assert record["error"]["code"] == error["code"]
        if payload == "nul":  # the strict reader refuses the head itself
            assert error["code"] == "upstream_error"
        else:
            assert error["reason"] == record["policy"]["reason"] == "content_type_not_allowed"
        assert_log_verifies(services)
    finally:
        await services.close()


async def test_research_keeps_the_record_of_a_hostile_page(hostile, search_gateways) -> None:
    hostile.replies = [hostile_reply("content-encoding", PAYLOADS["not-utf-8"])]
    port = int(hostile.server.sockets[0].getsockname()[1])
    gateway = await search_gateways(
        policies=policies_for(port, agent={}),
        site_port=port,
        hits=[("Hostile", f"http://site.example.com:{port}/x", "a page")],
    )
    status, body = await gateway.post("/v1/research", "agent", query="q", fetch_top_n=1)
    assert status == 200, body
    (page,) = body["pages"]
    assert page["error"]["code"] == "upstream_error"
    assert "\\xff" in page["error"]["message"]
    fetches = [r for r in audit_records(gateway.services) if r["event"]["action"] == "WebFetch"]
    assert len(fetches) == 1 and fetches[0]["error"]["code"] == "upstream_error"
    assert_log_verifies(gateway.services)


async def test_an_agents_bad_credential_bytes_are_on_record(
    hostile, write_policy, make_config, aiohttp_client
) -> None:
    port = int(hostile.server.sockets[0].getsockname()[1])
    client_config = ClientConfig(id="agent", token_sha256="0" * 64)
    services, client = await gateway_for(
        port, write_policy, make_config, aiohttp_client, clients=(client_config,)
    )
    try:
        for value in (b"Bearer \xff\xfe", b"Bearer \xed\xa0\x80", b"Bearer " + b"\xff" * 8000):
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(
                b"POST /v1/fetch HTTP/1.1\r\nHost: gw\r\nAuthorization: "
                + value
                + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
            )
            answer = await reader.read()
            writer.close()
            assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        failures = [r for r in audit_records(services) if r["event"]["action"] == "auth_failure"]
        assert failures and failures[0]["network"]["application"] == "api"
        assert_log_verifies(services)
    finally:
        await services.close()


@pytest.mark.parametrize(("field", "payload"), CASES, ids=IDS)
async def test_proxy_records_every_hostile_head(
    hostile, tmp_path, make_config, field, payload
) -> None:
    hostile.replies = [hostile_reply(field, PAYLOADS[payload])]
    port = int(hostile.server.sockets[0].getsockname()[1])
    env = await start_env(tmp_path, make_config, extra_ports=(port,))
    try:
        raw = await raw_exchange(
            env.port,
            f"GET http://site.example.com:{port}/x HTTP/1.1\r\nHost: site.example.com:{port}\r\n"
            "Connection: close\r\n\r\n".encode(),
        )
        status, _, _ = parse_head(raw)
        assert status in (200, 302, 403, 502), raw[:300]
        (record,) = env.records("proxy_http")
        assert record["url"]["original"] == f"http://site.example.com:{port}/x"
        assert_log_verifies(env.services)
    finally:
        await env.close()


@pytest.mark.parametrize("payload", list(PAYLOADS))
async def test_proxy_records_a_hostile_request_line(tmp_path, make_config, payload) -> None:
    env = await start_env(tmp_path, make_config)
    try:
        target = b"http://site.example.com:%d/p" % env.upstream_port + PAYLOADS[payload][:2000]
        raw = await raw_exchange(
            env.port, b"GET " + target + b" HTTP/1.1\r\nHost: site.example.com\r\n\r\n"
        )
        status, _, _ = parse_head(raw)
        assert status in (400, 403, 414), raw[:300]
        assert env.records("proxy_http")
        assert_log_verifies(env.services)
    finally:
        await env.close()
