"""Class: rate limits count calls, not envelopes. An MCP JSON-RPC batch of 32 `tools/call`
counts 32 against `requests_per_minute` (each call past the limit is a tool error on
record, and never reaches the upstream) and takes a `concurrent` slot per call it runs."""

from __future__ import annotations

import hashlib

import orjson
import pytest

from gateway.config import ClientConfig, ClientLimits
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy
from tests.server.conftest import audit_records

HEADERS = {"Authorization": "Bearer tok-agent", "Accept": "application/json"}


def call(n: int, url: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": "WebFetch", "arguments": {"url": url}},
    }


@pytest.fixture
async def gateway(upstream, write_policy, make_config, aiohttp_client):
    started = []

    async def start(limits: ClientLimits):
        config = make_config(
            write_policy(loopback_policy(upstream.port)),
            clients=(
                ClientConfig(
                    id="agent",
                    token_sha256=hashlib.sha256(b"tok-agent").hexdigest(),
                    limits=limits,
                ),
            ),
        )
        services = Services(config)
        services.open()
        started.append(services)
        return services, await aiohttp_client(make_app(services))

    yield start
    for services in started:
        await services.close()


async def post_batch(client, calls: list[dict], version: str = "2025-03-26"):
    response = await client.post(
        "/mcp",
        data=orjson.dumps(calls),
        headers={**HEADERS, "MCP-Protocol-Version": version, "Content-Type": "application/json"},
    )
    return response, await response.json()


async def test_a_batch_of_32_calls_counts_32_against_requests_per_minute(gateway, upstream) -> None:
    services, client = await gateway(ClientLimits(requests_per_minute=3))
    url = f"http://site.example.com:{upstream.port}/page"
    response, replies = await post_batch(client, [call(n, url) for n in range(32)])
    assert response.status == 200 and len(replies) == 32
    results = [reply["result"] for reply in replies]
    passed = [r for r in results if not r["isError"]]
    refused = [r["structuredContent"]["error"] for r in results if r["isError"]]
    assert len(passed) == 3 and len(refused) == 29
    assert {e["code"] for e in refused} == {"rate_limited"}
    records = [r for r in audit_records(services) if r["event"]["action"] == "WebFetch"]
    assert len(records) == 32  # each refused call is on record too
    assert sum(r["event"]["outcome"] == "success" for r in records) == 3
    assert sum(r.get("error", {}).get("code") == "rate_limited" for r in records) == 29
    # The minute is spent: the next POST, batch or not, is refused whole.
    response, _ = await post_batch(client, [call(99, url)])
    assert response.status == 429


async def test_a_batch_holds_a_concurrent_slot_per_call_it_runs(gateway, upstream) -> None:
    services, client = await gateway(ClientLimits(concurrent=1))
    url = f"http://site.example.com:{upstream.port}/page"
    response, replies = await post_batch(client, [call(n, url) for n in range(5)])
    # Run one after the other, each call holds the one slot only while it runs.
    assert response.status == 200
    assert [reply["result"]["isError"] for reply in replies] == [False] * 5
    assert services.limiter.in_flight("agent") == 0  # every lease given back


async def test_a_single_call_still_counts_once(gateway, upstream) -> None:
    services, client = await gateway(ClientLimits(requests_per_minute=2))
    url = f"http://site.example.com:{upstream.port}/page"
    for n in range(2):
        response = await client.post("/mcp", json=call(n, url), headers=HEADERS)
        assert response.status == 200
        assert (await response.json())["result"]["isError"] is False
    response = await client.post("/mcp", json=call(3, url), headers=HEADERS)
    assert response.status == 429
