"""Redis search cache, provider health and result ids against a real redis-server: what one
replica stores the other sees; with Redis down the cache is skipped and the rest stays local."""

from __future__ import annotations

import time

import pytest

from gateway.errors import UnavailableError
from gateway.search.failures import ErrorClass
from gateway.search.health import HealthState
from gateway.state.stores import RedisHealthStore, RedisIdStore, RedisSearchCache


def cache(shared, ttl=60.0):
    return RedisSearchCache(shared, ttl, encode=lambda v: v, decode=lambda v: v)


async def test_a_search_cached_by_one_replica_is_a_hit_on_the_other(connect) -> None:
    one, two = cache(await connect("a")), cache(await connect("b"))
    assert await two.get("k") is None
    await one.put("k", {"results": [1, 2]})
    assert await two.get("k") == {"results": [1, 2]}
    stats = await two.stats()
    assert (stats.hits, stats.misses, stats.entries) == (1, 1, 1)


@pytest.mark.parametrize(
    ("ttl", "stored"),
    [pytest.param(0.0, False, id="off"), pytest.param(60.0, True, id="on")],
)
async def test_cache_ttl_zero_turns_it_off(connect, ttl, stored) -> None:
    store = cache(await connect(), ttl)
    await store.put("k", {"v": 1})
    assert (await store.get("k") is not None) is stored


async def test_foreign_values_are_misses(connect) -> None:
    shared = await connect()
    await shared.redis.set(shared.key("search", "k"), b"\x80not json")
    assert await cache(shared).get("k") is None


async def test_a_provider_cooled_by_one_replica_is_cooling_on_the_other(connect) -> None:
    one = RedisHealthStore(await connect("a"), time.time)
    two = RedisHealthStore(await connect("b"), time.time)
    await one.record_failure("ddg", ErrorClass.RATE_LIMITED, retry_after=30)
    seen = await two.get("ddg")
    assert seen.state_at(time.time()) is HealthState.COOLING
    assert seen.last_error is ErrorClass.RATE_LIMITED
    [entry] = await two.snapshot(["ddg"])
    assert entry["state"] == "cooling" and entry["cooling_until"]
    await two.record_success("ddg")
    assert (await one.get("ddg")).state_at(time.time()) is HealthState.HEALTHY


async def test_failures_on_two_replicas_both_count(connect) -> None:
    one = RedisHealthStore(await connect("a"), time.time)
    two = RedisHealthStore(await connect("b"), time.time)
    await one.record_failure("brave", ErrorClass.SERVER_ERROR)
    assert (await two.get("brave")).state_at(time.time()) is HealthState.DEGRADED
    await two.record_failure("brave", ErrorClass.SERVER_ERROR)
    assert (await one.get("brave")).state_at(time.time()) is HealthState.COOLING


async def test_result_ids_resolve_on_the_other_replica_for_the_same_client(connect) -> None:
    one = RedisIdStore(await connect("a"), 60, time.monotonic)
    two = RedisIdStore(await connect("b"), 60, time.monotonic)
    await one.remember("agent", [("abc", "https://docs.example/a")])
    assert await two.resolve("agent", "abc") == "https://docs.example/a"
    assert await two.resolve("someone-else", "abc") is None
    assert await two.resolve("agent", "nope") is None


async def test_with_redis_down_cache_is_skipped_and_the_rest_stays_local(
    connect, redis_server
) -> None:
    shared = await connect(on_failure="open")
    search_cache, ids = cache(shared), RedisIdStore(shared, 60, time.monotonic)
    health = RedisHealthStore(shared, time.time)
    await redis_server.stop()
    assert await search_cache.get("k") is None  # the failing round trip marks Redis down
    assert not shared.available
    await search_cache.put("k", {"v": 1})
    assert await search_cache.get("k") is None
    await ids.remember("agent", [("abc", "https://docs.example/a")])
    assert await ids.resolve("agent", "abc") == "https://docs.example/a"
    await health.record_failure("ddg", ErrorClass.RATE_LIMITED, retry_after=30)
    assert (await health.get("ddg")).state_at(time.time()) is HealthState.COOLING
    text = shared.metrics.registry_text()
    assert 'gateway_shared_state_fallbacks_total{action="skipped",store="search_cache"}' in text


async def test_with_redis_down_and_failing_closed_ids_are_refused_not_kept_locally(
    connect, redis_server
) -> None:
    shared = await connect(on_failure="closed")
    ids = RedisIdStore(shared, 60, time.monotonic)
    await redis_server.stop()
    for _ in range(2):  # the failing round trip, then the known-down state
        with pytest.raises(UnavailableError) as refused:
            await ids.remember("agent", [("abc", "https://docs.example/a")])
        assert "on_failure: closed" in refused.value.message and refused.value.retry_after
    assert not shared.available
    assert await ids.resolve("agent", "abc") is None
    text = shared.metrics.registry_text()
    assert 'gateway_shared_state_fallbacks_total{action="refused",store="ids"} 2.0' in text
