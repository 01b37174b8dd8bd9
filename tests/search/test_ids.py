from __future__ import annotations

import logging

import pytest

from gateway.search.ids import EARLY_EVICTION_LOG_INTERVAL, InMemoryIdStore


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


async def test_expired_ids_are_dropped_before_the_bound_is_reached(clock) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryIdStore(100, clock, max_entries=10)
    await store.remember("c", [("1", "https://a.com/1"), ("2", "https://a.com/2")])
    clock.advance(100)
    await store.remember("c", [("3", "https://a.com/3")])
    assert len(store) == 1  # the expired two no longer take room
    assert store.evicted_early == 0


@pytest.mark.parametrize(
    ("steps", "alive", "evicted_early"),
    [
        # (seconds to advance, ids remembered then); max_entries=3, ttl=100
        pytest.param([(0, "ab"), (100, "cde")], "cde", 0, id="expired-make-room"),
        pytest.param([(0, "ab"), (99, "cd")], "bcd", 1, id="full-of-live-ids-oldest-goes"),
        pytest.param([(0, "a"), (10, "b"), (10, "a"), (10, "cd")], "acd", 1, id="re-seen-is-young"),
        pytest.param([(0, "abcde")], "cde", 2, id="one-search-over-the-bound"),
        pytest.param([(0, "a"), (50, "bc"), (50, "de")], "cde", 1, id="expired-first-then-oldest"),
    ],
)
async def test_eviction_order(  # type: ignore[no-untyped-def]
    clock, steps: list[tuple[float, str]], alive: str, evicted_early: int
) -> None:
    store = InMemoryIdStore(100, clock, max_entries=3)
    for seconds, ids in steps:
        clock.advance(seconds)
        await store.remember("c", [(i, f"https://a.com/{i}") for i in ids])
    found = {i for i in "abcde" if await store.resolve("c", i) is not None}
    assert found == set(alive)
    assert store.evicted_early == evicted_early


async def test_early_eviction_is_logged_at_most_once_a_minute(clock, caplog) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryIdStore(3600, clock, max_entries=1)
    with caplog.at_level(logging.WARNING, logger="gateway.search.ids"):
        for _ in range(5):
            await store.remember("c", [("x", "https://a.com/x"), ("y", "https://a.com/y")])
            clock.advance(10)
        clock.advance(EARLY_EVICTION_LOG_INTERVAL)
        await store.remember("c", [("z", "https://a.com/z"), ("w", "https://a.com/w")])
    warnings = [r for r in caplog.records if "before search.id_ttl" in r.getMessage()]
    assert len(warnings) == 2
    assert warnings[-1].__dict__["evicted_early_total"] == 7  # one per call, then two
