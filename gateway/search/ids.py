"""Result ids a client may fetch as "id:<id>": (client id, result id) -> canonical URL, with TTL.

The in-memory store is bounded (MAX_IDS): expired ids are dropped first, and only a store
still full of live ids drops its oldest ones early, counted and logged. It reads an injected
clock; a shared store implements the same async interface. It only remembers: deciding
whether the URL may be fetched stays with the policy.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Protocol

# the configuration has no knob for this (docs/design.md says so). URLs are capped at 2048
# characters, so 100,000 ids stay under ~250 MB even when every URL is that long (~50 MB at
# typical lengths). With the default id_ttl of an hour that is one 20-result search every
# 0.7 s, sustained, before a live id goes early; past it the oldest live ids go first.
MAX_IDS = 100_000
EARLY_EVICTION_LOG_INTERVAL = 60.0  # seconds between warnings while ids go before their TTL

_log = logging.getLogger(__name__)


class IdStore(Protocol):
    async def remember(self, client_id: str, entries: Iterable[tuple[str, str]]) -> None:
        """Store (result id, canonical URL) pairs for this client."""
        ...

    async def resolve(self, client_id: str, result_id: str) -> str | None:
        """The canonical URL, or None when the id is unknown or expired for this client."""
        ...


class InMemoryIdStore:
    def __init__(self, ttl: float, clock: Callable[[], float], max_entries: int = MAX_IDS) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._ttl = ttl
        self._clock = clock
        self._max_entries = max_entries
        # Kept in expiry order: every entry gets the same TTL from a monotonic clock, and a
        # re-seen id moves to the end, so the first entry is always the next to expire.
        self._entries: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()
        self.evicted_early = 0  # live ids dropped before id_ttl because the store was full
        self._last_warning: float | None = None

    async def remember(self, client_id: str, entries: Iterable[tuple[str, str]]) -> None:
        now = self._clock()
        expires = now + self._ttl
        for result_id, url in entries:
            key = (client_id, result_id)
            self._entries[key] = (expires, url)
            self._entries.move_to_end(key)  # a re-seen id lives on from now
        self._drop_expired(now)
        early = 0
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
            early += 1
        if early:
            self.evicted_early += early
            self._warn(now)

    async def resolve(self, client_id: str, result_id: str) -> str | None:
        entry = self._entries.get((client_id, result_id))
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[(client_id, result_id)]
            return None
        return entry[1]

    def __len__(self) -> int:
        return len(self._entries)

    def _drop_expired(self, now: float) -> None:
        while self._entries:
            expires, _ = next(iter(self._entries.values()))
            if expires > now:
                return
            self._entries.popitem(last=False)

    def _warn(self, now: float) -> None:
        last = self._last_warning
        if last is not None and now - last < EARLY_EVICTION_LOG_INTERVAL:
            return
        self._last_warning = now
        _log.warning(
            "search result ids dropped before search.id_ttl: the in-memory id store is full",
            extra={"max_ids": self._max_entries, "evicted_early_total": self.evicted_early},
        )
