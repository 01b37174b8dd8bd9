"""Two `gateway serve` processes sharing one real redis-server share search state: a search
cached by one is answered from that cache by the other, and a provider cooled by one (it
answered 429 with Retry-After) is skipped by the other without being asked again.

The providers are SearXNG fakes in this process on loopback, reached by both gateways under
names that `resolver.hosts` maps to 127.0.0.1 (with `allow_private: true`)."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import loopback_policy
from tests.processes import GatewayProcess
from tests.search.conftest import FakeUpstream, Reply
from tests.tools.searchgateway import searxng_ok

PROVIDERS = ("searx-a", "searx-b")


@pytest.fixture
async def page(aiohttp_server):
    """The site the results point at, so a result id can be fetched."""

    async def one(request: web.Request) -> web.Response:
        return web.Response(
            text="<html><title>One</title><p>The page.</p></html>", content_type="text/html"
        )

    app = web.Application()
    app.router.add_get("/one", one)
    return await aiohttp_server(app, host="127.0.0.1")


@pytest.fixture
async def fakes(aiohttp_server, page) -> dict[str, FakeUpstream]:
    """One SearXNG fake per provider id, each answering two allowed results by default."""
    started = {}
    for provider in PROVIDERS:
        fake = FakeUpstream()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", fake.handle)
        server = await aiohttp_server(app, host="127.0.0.1")
        fake.base_url = f"http://{provider}.provider.example:{server.port}"
        hits = [
            (f"{provider} one", f"http://site.example.com:{page.port}/one", "First."),
            (f"{provider} two", f"http://other.example.com:{page.port}/two", "Second."),
        ]
        fake.default = Reply(200, searxng_ok(hits))
        started[provider] = fake
    return started


@pytest.fixture
async def replicas(tmp_path, redis_server, fakes, page):
    (tmp_path / "policy.yaml").write_text(loopback_policy(page.port))
    names = [f"{p}.provider.example" for p in PROVIDERS] + ["site.example.com"]
    config = {
        "policy": "policy.yaml",
        "audit": {"path": "audit/gateway-{instance}.jsonl"},
        "state": {"redis": redis_server.url},
        "search": {
            "providers": [
                {
                    "id": provider,
                    "kind": "searxng",
                    "base_url": fakes[provider].base_url,
                    "allow_private": True,
                }
                for provider in PROVIDERS
            ],
            "cache_ttl": 600,
        },
        "resolver": {"hosts": {name: ["127.0.0.1"] for name in names}},
    }
    started = []
    for name in ("replica-a", "replica-b"):
        started.append(await GatewayProcess(tmp_path, {**config, "instance_id": name}).start())
    yield started
    for gateway in started:
        await gateway.kill()


async def post(gateway: GatewayProcess, path: str, **body: str) -> dict:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gateway.url}{path}", json=body) as response,
    ):
        answer = await response.json()
        assert response.status == 200, answer
        return answer


async def search(gateway: GatewayProcess, query: str) -> dict:
    return await post(gateway, "/v1/search", query=query)


async def test_a_search_cached_by_one_replica_is_answered_from_cache_by_the_other(
    replicas, fakes
) -> None:
    a, b = replicas
    first = await search(a, "shared cache")
    again = await search(b, "shared cache")
    assert (first["cached"], again["cached"]) == (False, True)
    assert again["envelope"]["cached"] is True
    assert again["provider"] == first["provider"] == "searx-a"
    assert [r["url"] for r in again["results"]] == [r["url"] for r in first["results"]]
    assert len(fakes["searx-a"].requests) == 1
    assert fakes["searx-b"].requests == []
    # A result id handed out by one replica is fetched through the other.
    fetched = await post(b, "/v1/fetch", url=f"id:{first['results'][0]['id']}")
    assert fetched["envelope"]["final_url"] == first["results"][0]["url"]
    assert "The page." in fetched["content"]


async def test_a_provider_cooled_by_one_replica_is_skipped_by_the_other(replicas, fakes) -> None:
    a, b = replicas
    fakes["searx-a"].queue(
        Reply(429, {"error": "too many requests"}, headers={"Retry-After": "120"})
    )
    first = await search(a, "cooling one")
    assert first["provider"] == "searx-b"
    [warning] = first["warnings"]
    assert warning.startswith("searx-a: [rate_limited]")
    second = await search(b, "cooling two")
    assert second["provider"] == "searx-b" and second["cached"] is False
    [warning] = second["warnings"]
    assert warning.startswith("searx-a: [rate_limited]") and "cooling down until" in warning
    assert len(fakes["searx-a"].requests) == 1
    assert [r.query["q"] for r in fakes["searx-b"].requests] == ["cooling one", "cooling two"]
    async with aiohttp.ClientSession() as session, session.get(f"{b.url}/v1/status") as answer:
        status = await answer.json()
    providers = {p["id"]: p for p in status["search"]["providers"]}
    assert providers["searx-a"]["state"] == "cooling"
