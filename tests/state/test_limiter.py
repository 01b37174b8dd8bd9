"""RedisLimiter against a real redis-server: one limit across replicas, one round trip per
request, leases that outlive a crash only by their TTL, and both failure modes."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config import ClientLimits
from gateway.errors import RateLimitedError, UnavailableError
from gateway.state.limiter import RedisLimiter

# Commands a client sends itself; what a script runs inside Redis is counted apart by Redis
# (commandstats counts both), so round trips are the script calls plus any plain command.
ROUND_TRIP_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_script", "cmdstat_ping")


async def command_calls(shared) -> int:
    stats = await shared.redis.info("commandstats")
    return sum(int(stats[name]["calls"]) for name in ROUND_TRIP_COMMANDS if name in stats)


@pytest.mark.parametrize(
    ("limits", "admitted"),
    [
        pytest.param(ClientLimits(requests_per_minute=5), 5, id="rpm-burst"),
        pytest.param(ClientLimits(requests_per_minute=1), 1, id="rpm-one"),
        pytest.param(ClientLimits(concurrent=3), 3, id="concurrent"),
        pytest.param(ClientLimits(requests_per_minute=10, concurrent=2), 2, id="both-conc-first"),
        pytest.param(ClientLimits(requests_per_minute=2, concurrent=5), 2, id="both-rpm-first"),
    ],
)
async def test_limits_hold_across_two_replicas(connect, limits, admitted) -> None:
    one, two = RedisLimiter(await connect("a")), RedisLimiter(await connect("b"))
    held = []
    for i in range(admitted):
        held.append(await (one if i % 2 else two).acquire("agent", limits))
    for limiter in (one, two):
        with pytest.raises(RateLimitedError) as refused:
            await limiter.acquire("agent", limits)
        assert 0 < refused.value.retry_after <= 60
        assert "across replicas" in refused.value.message
    # Another client is counted apart.
    await (await one.acquire("other", limits)).release()


async def test_retry_after_is_when_the_oldest_request_leaves_the_window(connect) -> None:
    limiter = RedisLimiter(await connect())
    await limiter.acquire("agent", ClientLimits(requests_per_minute=1))
    with pytest.raises(RateLimitedError) as refused:
        await limiter.acquire("agent", ClientLimits(requests_per_minute=1))
    assert 59 < refused.value.retry_after <= 60


async def test_released_leases_free_the_concurrency_on_the_other_replica(connect) -> None:
    limits = ClientLimits(concurrent=1)
    one, two = RedisLimiter(await connect("a")), RedisLimiter(await connect("b"))
    lease = await one.acquire("agent", limits)
    with pytest.raises(RateLimitedError):
        await two.acquire("agent", limits)
    await lease.release()
    await lease.release()  # idempotent
    await one.flush()
    await (await two.acquire("agent", limits)).release()


async def test_one_round_trip_per_request_with_releases_carried_along(connect) -> None:
    shared = await connect()
    limiter = RedisLimiter(shared)
    limits = ClientLimits(requests_per_minute=1000, concurrent=4)
    await (await limiter.acquire("agent", limits)).release()  # loads the script
    before = await command_calls(shared)
    for _ in range(50):
        lease = await limiter.acquire("agent", limits)
        await lease.release()
    after = await command_calls(shared)
    assert after - before <= 50


async def test_steady_load_never_flushes_releases_apart(connect) -> None:
    """Each acquire comes within the release delay of the last release: it carries the
    release along, and no separate flush runs (one timer left armed would fire every 20 ms)."""
    shared = await connect()
    limiter = RedisLimiter(shared)
    limits = ClientLimits(requests_per_minute=1000, concurrent=4)
    await (await limiter.acquire("agent", limits)).release()
    before = await command_calls(shared)
    for _ in range(40):
        lease = await limiter.acquire("agent", limits)
        await lease.release()
        await asyncio.sleep(0.004)  # the next request arrives well within RELEASE_DELAY_S
    after = await command_calls(shared)
    # One spare for a scheduler hiccup longer than the delay; a stray timer costs about 8.
    assert after - before <= 41


async def test_a_crashed_replicas_leases_expire(connect) -> None:
    limits = ClientLimits(concurrent=1)
    crashed = RedisLimiter(await connect("a"), lease_ttl=0.3)
    await crashed.acquire("agent", limits)  # never released: the replica "died"
    survivor = RedisLimiter(await connect("b"))
    with pytest.raises(RateLimitedError):
        await survivor.acquire("agent", limits)
    crashed._held.clear()  # a dead replica renews nothing
    await asyncio.sleep(0.5)
    await (await survivor.acquire("agent", limits)).release()


async def test_held_leases_are_renewed_past_their_ttl(connect) -> None:
    limits = ClientLimits(concurrent=1)
    holder = RedisLimiter(await connect("a"), lease_ttl=0.3)
    lease = await holder.acquire("agent", limits)
    await asyncio.sleep(0.7)
    with pytest.raises(RateLimitedError):
        await RedisLimiter(await connect("b")).acquire("agent", limits)
    await lease.release()


@pytest.mark.parametrize(
    ("on_failure", "expected"),
    [
        pytest.param("closed", "refused", id="closed"),
        pytest.param("open", "local", id="open"),
    ],
)
async def test_redis_down(connect, redis_server, on_failure, expected) -> None:
    shared = await connect(on_failure=on_failure)
    limiter = RedisLimiter(shared)
    limits = ClientLimits(requests_per_minute=2)
    await limiter.acquire("agent", limits)
    await redis_server.stop()
    if expected == "refused":
        with pytest.raises(UnavailableError) as refused:
            await limiter.acquire("agent", limits)
        assert refused.value.retry_after and "on_failure: closed" in refused.value.message
        assert shared.readiness_problem() is not None
    else:
        # Counted in this process only: the local window still stops a runaway client.
        await limiter.acquire("agent", limits)
        await limiter.acquire("agent", limits)
        with pytest.raises(RateLimitedError):
            await limiter.acquire("agent", limits)
        assert shared.readiness_problem() is None
    assert not shared.available
    assert "redis_up 0.0" in shared.metrics.registry_text()


async def test_unlimited_clients_cost_no_round_trip(connect) -> None:
    shared = await connect()
    limiter = RedisLimiter(shared)
    before = await command_calls(shared)
    for _ in range(10):
        await (await limiter.acquire("agent", ClientLimits())).release()
    assert await command_calls(shared) == before


async def test_close_waits_for_a_release_already_on_its_way(connect) -> None:
    """The delayed flush runs as a task the limiter keeps: closing after it started waits for
    it, so the lease is given back before the connection goes (none is left to its TTL)."""
    limits = ClientLimits(concurrent=1)
    shared = await connect("a")
    one = RedisLimiter(shared)
    lease = await one.acquire("agent", limits)
    await lease.release()
    for _ in range(200):  # the release delay is 20 ms: the timer fires well within 2 s
        if one._flusher is None:
            break
        await asyncio.sleep(0.01)
    assert one._flusher is None  # the flush task started (or ended); close must not drop it
    await one.close()
    await shared.close()
    await (await RedisLimiter(await connect("b")).acquire("agent", limits)).release()
