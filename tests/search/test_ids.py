from __future__ import annotations

from gateway.search.ids import InMemoryIdStore


async def test_remember_resolve_per_client_and_ttl(clock) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryIdStore(3600, clock)
    await store.remember("agent-a", [("id1", "https://a.com/"), ("id2", "https://b.com/")])
    assert await store.resolve("agent-a", "id1") == "https://a.com/"
    assert await store.resolve("agent-b", "id1") is None  # ids belong to the client that searched
    clock.advance(3599)
    assert await store.resolve("agent-a", "id2") == "https://b.com/"
    clock.advance(1)
    assert await store.resolve("agent-a", "id2") is None
    assert await store.resolve("agent-a", "unknown") is None


async def test_seeing_an_id_again_extends_it(clock) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryIdStore(100, clock)
    await store.remember("c", [("id1", "https://a.com/")])
    clock.advance(90)
    await store.remember("c", [("id1", "https://a.com/")])
    clock.advance(90)
    assert await store.resolve("c", "id1") == "https://a.com/"


async def test_bounded_oldest_goes(clock) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryIdStore(3600, clock, max_entries=2)
    await store.remember("c", [("1", "https://a.com/1"), ("2", "https://a.com/2")])
    await store.remember("c", [("3", "https://a.com/3")])
    assert len(store) == 2
    assert await store.resolve("c", "1") is None
    assert await store.resolve("c", "3") == "https://a.com/3"
