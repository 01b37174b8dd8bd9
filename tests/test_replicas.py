"""Two `gateway serve` processes sharing one real redis-server behave as one gateway: a
client's rate limit holds across both, and killing Redis shows the configured failure mode."""

from __future__ import annotations

import hashlib

import aiohttp
import pytest

from tests.conftest import loopback_policy
from tests.processes import GatewayProcess

TOKEN = "replica-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RPM = 3


@pytest.fixture
async def replicas(tmp_path, redis_server, request):
    on_failure = getattr(request, "param", "closed")
    (tmp_path / "policy.yaml").write_text(loopback_policy(80))
    started = []
    for name in ("replica-a", "replica-b"):
        config = {
            "instance_id": name,
            "policy": "policy.yaml",
            "audit": {"path": "audit/gateway-{instance}.jsonl"},
            "clients": [
                {
                    "id": "agent",
                    "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
                    "limits": {"requests_per_minute": RPM},
                }
            ],
            "state": {"redis": redis_server.url, "on_failure": on_failure},
        }
        started.append(await GatewayProcess(tmp_path, config).start())
    yield started
    for gateway in started:
        await gateway.kill()


async def explain(session: aiohttp.ClientSession, gateway: GatewayProcess) -> tuple[int, dict]:
    async with session.post(
        f"{gateway.url}/v1/policy/explain", json={"url": "http://x.example.com/"}, headers=AUTH
    ) as response:
        return response.status, {**await response.json(), "headers": dict(response.headers)}


async def test_a_clients_rate_limit_holds_across_replicas(replicas) -> None:
    a, b = replicas
    async with aiohttp.ClientSession() as session:
        statuses = [(await explain(session, (a, b)[i % 2]))[0] for i in range(RPM)]
        assert statuses == [200] * RPM
        for gateway in (a, b):
            status, body = await explain(session, gateway)
            assert status == 429 and body["error"]["code"] == "rate_limited"
            assert int(body["headers"]["Retry-After"]) >= 1
        async with session.get(f"{a.url}/metrics") as response:
            text = await response.text()
    assert "gateway_redis_up 1.0" in text


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [pytest.param("closed", 503, id="closed"), pytest.param("open", 200, id="open")],
    indirect=["replicas"],
)
async def test_killing_redis_shows_the_failure_mode(replicas, redis_server, expected) -> None:
    a, _ = replicas
    await redis_server.stop()
    async with aiohttp.ClientSession() as session:
        status, body = await explain(session, a)
        assert status == expected, body
        if expected == 503:
            assert body["error"]["code"] == "unavailable"
            assert "Redis" in body["error"]["message"]
            assert body["headers"]["Retry-After"]
        async with session.get(f"{a.url}/readyz") as response:
            assert response.status == (503 if expected == 503 else 200)
            ready = await response.json()
        if expected == 200:
            assert ready["status"] == "ready"
            [degraded] = ready["degraded"]
            assert degraded.startswith("shared state down: Redis at redis://127.0.0.1:")
            assert "on_failure is open" in degraded
        async with session.get(f"{a.url}/metrics") as response:
            text = await response.text()
    assert "gateway_redis_up 0.0" in text
    assert any(entry.get("message") == "shared state down" for entry in a.oplog)
