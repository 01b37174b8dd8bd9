from __future__ import annotations

import pytest

from gateway.search.cache import InMemorySearchCache, search_cache_key
from gateway.search.query import SearchQuery


async def test_ttl_hits_and_expiry(clock) -> None:  # type: ignore[no-untyped-def]
    cache: InMemorySearchCache[str] = InMemorySearchCache(600, clock)
    assert await cache.get("k") is None
    await cache.put("k", "v")
    clock.advance(599)
    assert await cache.get("k") == "v"
    clock.advance(1)
    assert await cache.get("k") is None
    stats = await cache.stats()
    assert (stats.hits, stats.misses, stats.entries) == (1, 2, 0)


async def test_ttl_zero_turns_it_off(clock) -> None:  # type: ignore[no-untyped-def]
    cache: InMemorySearchCache[str] = InMemorySearchCache(0, clock)
    await cache.put("k", "v")
    assert await cache.get("k") is None
    assert (await cache.stats()).entries == 0


async def test_bounded_least_recently_used_goes(clock) -> None:  # type: ignore[no-untyped-def]
    cache: InMemorySearchCache[int] = InMemorySearchCache(600, clock, max_entries=3)
    for i in range(3):
        await cache.put(f"k{i}", i)
    assert await cache.get("k0") == 0  # k0 is now the most recent
    await cache.put("k3", 3)
    assert await cache.get("k1") is None
    assert [await cache.get(k) for k in ("k0", "k2", "k3")] == [0, 2, 3]
    assert (await cache.stats()).entries == 3


BASE = {"query": "rust async", "max_results": 10}


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"query": "rust sync"}, id="query"),
        pytest.param({"max_results": 5}, id="count"),
        pytest.param({"region": "de"}, id="region"),
        pytest.param({"freshness": "day"}, id="freshness"),
        pytest.param({"time_range": "2025-01-01..2025-02-01"}, id="time-range"),
        pytest.param({"site": "tokio.rs"}, id="site"),
        pytest.param({"include_domains": ["tokio.rs"]}, id="include"),
        pytest.param({"exclude_domains": ["tokio.rs"]}, id="exclude"),
    ],
)
def test_key_changes_with_every_field(change: dict) -> None:
    base = search_cache_key(SearchQuery.from_fields(BASE), ["ddg"], pinned=False)
    changed = search_cache_key(SearchQuery.from_fields({**BASE, **change}), ["ddg"], pinned=False)
    assert base != changed


def test_key_changes_with_providers_and_pinning() -> None:
    query = SearchQuery.from_fields(BASE)
    keys = {
        search_cache_key(query, ["ddg"], pinned=False),
        search_cache_key(query, ["ddg", "brave"], pinned=False),
        search_cache_key(query, ["brave", "ddg"], pinned=False),
        search_cache_key(query, ["ddg"], pinned=True),
    }
    assert len(keys) == 4


def test_key_ignores_spelling_that_validation_normalises() -> None:
    a = SearchQuery.from_fields({"query": "rust  async", "site": "Tokio.RS."})
    b = SearchQuery.from_fields({"query": "rust async", "site": "tokio.rs"})
    assert search_cache_key(a, ["ddg"], pinned=False) == search_cache_key(b, ["ddg"], pinned=False)
