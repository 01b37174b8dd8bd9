"""Client identity on the API: bearer tokens (401 with a clear message and an auth_failure
record), each client's own policy, and per-client limits (429 with Retry-After)."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config import ClientConfig, ClientLimits
from gateway.runtime import Services
from gateway.server.app import make_app
from tests.conftest import loopback_policy
from tests.server.conftest import audit_records


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
async def api(upstream, write_policy, make_config, aiohttp_client):
    strict = write_policy("name: strict\n", name="strict")
    config = make_config(
        write_policy(loopback_policy(upstream.port)),
        clients=(
            ClientConfig(id="open-agent", token_sha256=digest("tok-open")),
            ClientConfig(id="strict-agent", token_sha256=digest("tok-strict"), policy=strict),
            ClientConfig(
                id="slow-agent",
                token_sha256=digest("tok-slow"),
                limits=ClientLimits(requests_per_minute=2),
            ),
        ),
    )
    services = Services(config)
    services.open()
    client = await aiohttp_client(make_app(services))
    yield client, services
    await services.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing bearer token"),
        (bearer("wrong"), "unknown token"),
        ({"Authorization": "Basic b3Blbi1hZ2VudDp0b2stb3Blbg=="}, "missing bearer token"),
    ],
    ids=["none", "unknown", "wrong-scheme"],
)
async def test_unauthenticated_calls_are_401_and_audited(api, headers, message) -> None:
    client, services = api
    response = await client.post(
        "/v1/policy/explain", json={"url": "http://a.example.com/"}, headers=headers
    )
    assert response.status == 401
    body = await response.json()
    assert body["error"]["code"] == "unauthorized" and message in body["error"]["message"]
    [record] = [r for r in audit_records(services) if r["event"]["action"] == "auth_failure"]
    assert record["network"] == {"application": "api"}
    assert record["event"]["outcome"] == "failure" and message in record["event"]["reason"]
    assert "wrong" not in str(record) and "tok-open" not in str(record)  # no token is logged


async def test_public_paths_need_no_token(api) -> None:
    client, _ = api
    assert (await client.get("/healthz")).status == 200


@pytest.mark.parametrize(
    ("token", "decision", "policy"),
    [("tok-open", "allow", "loopback-test"), ("tok-strict", "deny", "strict")],
)
async def test_each_client_gets_its_own_policy(api, token, decision, policy) -> None:
    client, _ = api
    response = await client.post(
        "/v1/policy/explain", json={"url": "http://site.example.com/"}, headers=bearer(token)
    )
    body = await response.json()
    assert body["decision"] == decision and body["policy"]["name"] == policy


async def test_rate_limit_is_429_with_retry_after(api) -> None:
    client, services = api
    statuses = []
    for _ in range(3):
        response = await client.post(
            "/v1/policy/explain", json={"url": "http://x.example.com/"}, headers=bearer("tok-slow")
        )
        statuses.append(response.status)
    assert statuses == [200, 200, 429]
    body = await response.json()
    assert body["error"]["code"] == "rate_limited"
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    other = await client.post(
        "/v1/policy/explain", json={"url": "http://x.example.com/"}, headers=bearer("tok-open")
    )
    assert other.status == 200  # limits are per client
    assert services.limiter.in_flight("slow-agent") == 0  # type: ignore[attr-defined]


async def test_hundreds_of_failed_tokens_are_throttled_and_recorded_as_counts(api) -> None:
    """Class: failed tokens are unthrottled. From one address, 300 bad tokens: the first 20
    are 401, the rest 429 with Retry-After; the log holds the first failure at once and
    the others as one record with their count, not 300 records."""
    client, services = api
    statuses = []
    for n in range(300):
        response = await client.post(
            "/v1/policy/explain", json={"url": "http://a.example.com/"}, headers=bearer(f"w{n}")
        )
        statuses.append(response.status)
        if response.status == 429:
            assert int(response.headers["Retry-After"]) >= 1
            assert (await response.json())["error"]["code"] == "rate_limited"
    assert statuses == [401] * 20 + [429] * 280
    ok = await client.post("/v1/policy/explain", json={"url": "http://a.example.com/"},
                           headers=bearer("tok-open"))  # fmt: skip
    assert ok.status == 200  # a valid token from the same address is never throttled
    before = [r for r in audit_records(services) if r["event"]["action"] == "auth_failure"]
    assert len(before) == 1
    services.auth_failures.flush(everything=True)
    first, counted = [r for r in audit_records(services) if r["event"]["action"] == "auth_failure"]
    assert counted["event"]["count"] == 299
    assert counted["source"]["ip"] == first["source"]["ip"] == "127.0.0.1"
    assert "w1" not in str(counted)  # no token is ever logged
