"""Result ids a client may fetch as "id:<id>": (client id, result id) -> canonical URL, with TTL.

The in-memory store is bounded (the oldest entries go first) and reads an injected clock;
a shared store implements the same async interface. It only remembers; deciding whether the
URL may be fetched stays with the policy.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Protocol

DEFAULT_MAX_IDS = 100_000


class IdStore(Protocol):
    async def remember(self, client_id: str, entries: Iterable[tuple[str, str]]) -> None:
        """Store (result id, canonical URL) pairs for this client."""
        ...

    async def resolve(self, client_id: str, result_id: str) -> str | None:
        """The canonical URL, or None when the id is unknown or expired for this client."""
        ...


class InMemoryIdStore:
    def __init__(
        self, ttl: float, clock: Callable[[], float], max_entries: int = DEFAULT_MAX_IDS
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._ttl = ttl
        self._clock = clock
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[float, str]] = OrderedDict()

    async def remember(self, client_id: str, entries: Iterable[tuple[str, str]]) -> None:
        expires = self._clock() + self._ttl
        for result_id, url in entries:
            key = (client_id, result_id)
            self._entries[key] = (expires, url)
            self._entries.move_to_end(key)  # a re-seen id lives on from now
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

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
