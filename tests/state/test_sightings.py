"""Host sightings shared through a real redis-server: what one replica saw, another knows;
bounded per client; with Redis down they live in the process."""

from __future__ import annotations

from gateway.state.sightings import RedisHostSightings


async def test_one_replica_sees_what_the_other_noted(connect) -> None:
    one, two = RedisHostSightings(await connect("a")), RedisHostSightings(await connect("b"))
    await one.seen_in_content("agent", ["collector.example"])
    assert await two.only_from_content("agent", "collector.example")
    assert not await two.only_from_content("other-agent", "collector.example")
    await two.requested("agent", "collector.example")
    assert not await one.only_from_content("agent", "collector.example")


async def test_bounded_per_client(connect) -> None:
    shared = await connect()
    store = RedisHostSightings(shared, max_hosts=5)
    await store.seen_in_content("agent", [f"h{i}.example" for i in range(5)])
    await store.seen_in_content("agent", [f"n{i}.example" for i in range(5)])
    size = await shared.redis.zcard(shared.key("hosts", "content", "agent"))
    assert size == 5
    assert await shared.redis.pttl(shared.key("hosts", "content", "agent")) > 0


async def test_redis_down_keeps_them_local(connect, redis_server) -> None:
    shared = await connect(on_failure="open")
    store = RedisHostSightings(shared)
    await redis_server.stop()
    await store.seen_in_content("agent", ["collector.example"])
    assert await store.only_from_content("agent", "collector.example")
    await store.requested("agent", "collector.example")
    assert not await store.only_from_content("agent", "collector.example")
