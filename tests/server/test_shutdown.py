"""SIGTERM drains a real `gateway serve` process: unready first, no new
connections, requests in flight finish within `server.shutdown_grace` (or are cut off and
still audited), the final audit records and checkpoint are written, exit status 0."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.config import ServerConfig
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy
from tests.processes import GatewayProcess

CHUNKS = 10


def drip_upstream(started: asyncio.Event) -> web.Application:
    """`/drip/{seconds}`: a plain-text body of CHUNKS bytes spread over that many seconds."""

    async def drip(request: web.Request) -> web.StreamResponse:
        seconds = float(request.match_info["seconds"])
        response = web.StreamResponse(
            headers={"Content-Type": "text/plain", "Content-Length": str(CHUNKS)}
        )
        await response.prepare(request)
        started.set()
        for _ in range(CHUNKS):
            await asyncio.sleep(seconds / CHUNKS)
            await response.write(b"d")
        return response

    app = web.Application()
    app.router.add_get("/drip/{seconds}", drip)
    return app


def records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.fixture
async def drip(aiohttp_server):
    started = asyncio.Event()
    server = await aiohttp_server(drip_upstream(started), host="127.0.0.1")
    server.request_started = started
    return server


async def start_gateway(tmp_path: Path, upstream_port: int, grace: float) -> GatewayProcess:
    policy = loopback_policy(upstream_port).replace(
        "timeouts: {connect: 2, read: 1, total: 2.5}", "timeouts: {connect: 2, read: 5, total: 30}"
    )
    (tmp_path / "policy.yaml").write_text(policy)
    keys = tmp_path / "keys"
    subprocess.run(
        [sys.executable, "-m", "gateway", "keys", "generate", str(keys)],
        check=True,
        capture_output=True,
    )
    config = {
        "instance_id": "drain-test",
        "policy": "policy.yaml",
        "audit": {"path": "audit/gateway-{instance}.jsonl"},
        "signing_key": "keys/signing.key",
        "resolver": {"hosts": {"site.example.com": ["127.0.0.1"]}},
        "server": {"shutdown_grace": grace},
    }
    return await GatewayProcess(tmp_path, config).start()


async def fetch(gateway: GatewayProcess, url: str) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gateway.url}/v1/fetch", json={"url": url}) as response,
    ):
        return response.status, await response.json()


def verify(tmp_path: Path, log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "audit",
            "verify",
            str(log),
            "--key",
            str(tmp_path / "keys" / "signing.pub"),
        ],
        capture_output=True,
        text=True,
    )


async def test_sigterm_lets_a_slow_download_finish(tmp_path, drip) -> None:
    gateway = await start_gateway(tmp_path, drip.port, grace=10)
    try:
        url = f"http://site.example.com:{drip.port}/drip/2"
        request = asyncio.ensure_future(fetch(gateway, url))
        await asyncio.wait_for(drip.request_started.wait(), 10)
        gateway.signal(signal.SIGTERM)
        # New connections are refused once the listener is closed, while the download runs.
        for _ in range(100):
            if "listeners closed" in gateway.messages():
                break
            await asyncio.sleep(0.02)
        assert not request.done()
        with pytest.raises(aiohttp.ClientConnectionError):
            await fetch(gateway, url)
        status, body = await asyncio.wait_for(request, 10)
        assert status == 200, body
        assert body["envelope"]["body_bytes"] == CHUNKS
        assert await gateway.wait(10) == 0
    finally:
        await gateway.kill()
    messages = gateway.messages()
    assert (
        messages.index("draining") < messages.index("listeners closed") < messages.index("drained")
    )
    log = tmp_path / "audit" / "gateway-drain-test.jsonl"
    written = records(log)
    fetches = [r for r in written if r["event"]["action"] == "WebFetch"]
    assert len(fetches) == 1 and fetches[0]["event"]["outcome"] == "success"
    # The request's record, then the final checkpoint written at shutdown.
    assert [r["event"]["action"] for r in written[-2:]] == ["WebFetch", "checkpoint"]
    assert written[0]["event"]["action"] == "log_start"
    result = verify(tmp_path, log)
    assert result.returncode == 0, result.stdout + result.stderr


async def test_a_request_that_outlives_the_grace_is_cut_off_and_audited(tmp_path, drip) -> None:
    gateway = await start_gateway(tmp_path, drip.port, grace=1)
    try:
        request = asyncio.ensure_future(
            fetch(gateway, f"http://site.example.com:{drip.port}/drip/20")
        )
        await asyncio.wait_for(drip.request_started.wait(), 10)
        gateway.signal(signal.SIGTERM)
        status, body = await asyncio.wait_for(request, 15)
        assert await gateway.wait(15) == 0, gateway.oplog
    finally:
        await gateway.kill()
    assert status == 503 and body["error"]["code"] == "unavailable", body
    assert "shutdown_grace" in body["error"]["message"]
    assert "shutdown grace over: cutting off requests in flight" in gateway.messages()
    log = tmp_path / "audit" / "gateway-drain-test.jsonl"
    written = records(log)
    fetches = [r for r in written if r["event"]["action"] == "WebFetch"]
    assert len(fetches) == 1 and fetches[0]["event"]["outcome"] == "failure"
    assert fetches[0]["error"]["code"] == body["error"]["code"]
    assert [r["event"]["action"] for r in written[-2:]] == ["WebFetch", "checkpoint"]
    result = verify(tmp_path, log)
    assert result.returncode == 0, result.stdout + result.stderr


async def mcp_fetch(gateway: GatewayProcess, url: str) -> tuple[int, dict]:
    message = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "WebFetch", "arguments": {"url": url}},
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway.url}/mcp", json=message, headers={"Accept": "application/json"}
        ) as response,
    ):
        return response.status, await response.json()


async def test_an_mcp_call_that_outlives_the_grace_is_cut_off_and_audited(tmp_path, drip) -> None:
    gateway = await start_gateway(tmp_path, drip.port, grace=1)
    url = f"http://site.example.com:{drip.port}/drip/20"
    try:
        request = asyncio.ensure_future(mcp_fetch(gateway, url))
        await asyncio.wait_for(drip.request_started.wait(), 10)
        gateway.signal(signal.SIGTERM)
        status, answer = await asyncio.wait_for(request, 15)
        assert await gateway.wait(15) == 0, gateway.oplog
    finally:
        await gateway.kill()
    # A tool error the model can read, not a dropped connection.
    assert status == 200 and answer["id"] == 7, answer
    result = answer["result"]
    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert error["code"] == "unavailable" and "shutdown_grace" in error["message"]
    assert "shutdown_grace" in result["content"][0]["text"]
    log = tmp_path / "audit" / "gateway-drain-test.jsonl"
    written = records(log)
    fetches = [r for r in written if r["event"]["action"] == "WebFetch"]
    assert len(fetches) == 1 and fetches[0]["event"]["outcome"] == "failure"
    assert fetches[0]["error"]["code"] == "unavailable"
    assert fetches[0]["url"]["original"] == url
    assert fetches[0]["trace"]["id"] == error["request_id"]
    assert [r["event"]["action"] for r in written[-2:]] == ["WebFetch", "checkpoint"]
    checked = verify(tmp_path, log)
    assert checked.returncode == 0, checked.stdout + checked.stderr


async def test_an_idle_gateway_exits_at_once(tmp_path, drip) -> None:
    gateway = await start_gateway(tmp_path, drip.port, grace=30)
    try:
        gateway.signal(signal.SIGTERM)
        assert await gateway.wait(10) == 0
    finally:
        await gateway.kill()
    assert "drained" in gateway.messages()


async def test_readyz_turns_unready_while_draining(
    upstream, write_policy, make_config, aiohttp_client
) -> None:
    services = Services(
        make_config(write_policy(loopback_policy(upstream.port)), server=ServerConfig())
    )
    services.open()
    try:
        client = await aiohttp_client(make_app(services))
        assert (await client.get("/readyz")).status == 200
        services.draining = True
        response = await client.get("/readyz")
        assert response.status == 503
        assert response.headers["Retry-After"]
        body = await response.json()
        assert body["error"]["code"] == "unavailable" and "draining" in body["error"]["message"]
        refused = await client.post("/v1/fetch", json={"url": "http://site.example.com/"})
        assert refused.status == 503
        assert (await client.get("/healthz")).status == 200
    finally:
        await services.close()
