"""A TTL cache of search outcomes, keyed by everything that changes the answer.

`search_cache_key` hashes the validated query fields with the provider chain (or the one
provider asked). The in-memory store is bounded in entries (least recently used goes first)
and reads an injected clock; a shared store implements the same async interface.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import orjson

from gateway.search.query import SearchQuery

V = TypeVar("V")
DEFAULT_MAX_ENTRIES = 1024


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    entries: int

    def to_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "entries": self.entries}


def search_cache_key(query: SearchQuery, providers: Sequence[str], *, pinned: bool) -> str:
    """`pinned`: the caller named one provider, so no fallback; that is a different answer."""
    material = {"q": query.cache_fields(), "providers": list(providers), "pinned": pinned}
    return hashlib.sha256(orjson.dumps(material, option=orjson.OPT_SORT_KEYS)).hexdigest()


class SearchCache(Protocol[V]):
    async def get(self, key: str) -> V | None: ...

    async def put(self, key: str, value: V) -> None: ...

    async def stats(self) -> CacheStats: ...


class InMemorySearchCache(Generic[V]):
    """TTL seconds per entry; `ttl <= 0` turns the cache off (nothing stored, every get misses)."""

    def __init__(
        self, ttl: float, clock: Callable[[], float], max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._ttl = ttl
        self._clock = clock
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._hits = 0
        self._misses = 0

    @property
    def enabled(self) -> bool:
        return self._ttl > 0

    async def get(self, key: str) -> V | None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] > self._clock():
            self._entries.move_to_end(key)
            self._hits += 1
            return entry[1]
        if entry is not None:
            del self._entries[key]
        self._misses += 1
        return None

    async def put(self, key: str, value: V) -> None:
        if not self.enabled:
            return
        self._entries[key] = (self._clock() + self._ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    async def stats(self) -> CacheStats:
        now = self._clock()
        for key in [k for k, (expires, _) in self._entries.items() if expires <= now]:
            del self._entries[key]
        return CacheStats(self._hits, self._misses, len(self._entries))
