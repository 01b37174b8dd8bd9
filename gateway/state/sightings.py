"""Host sightings (gateway/tools/sightings.py) shared by every replica through Redis.

Per client two sorted sets, hosts met inside web content and hosts it requested, scored by
time; each is cut to the newest `max_hosts` and expires a day after its last change, so
memory stays bounded. While Redis is down the sightings live in this process (they only
ever add a check, so a replica that misses a sighting is never less strict than without
the feature on the requests it decides).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from gateway.state.connection import REDIS_FAILURES, SharedState
from gateway.tools.sightings import MAX_HOSTS_PER_CLIENT, InMemoryHostSightings

SIGHTINGS_TTL_MS = 86_400_000


class RedisHostSightings:
    def __init__(self, shared: SharedState, *, max_hosts: int = MAX_HOSTS_PER_CLIENT) -> None:
        self._shared = shared
        self._max_hosts = max_hosts
        self._local = InMemoryHostSightings(max_hosts=max_hosts)

    def _key(self, kind: str, client: str) -> str:
        return self._shared.key("hosts", kind, client)

    async def _add(self, kind: str, client: str, hosts: list[str]) -> bool:
        if not hosts or not self._shared.available:
            return not hosts
        key = self._key(kind, client)
        now = time.time()
        try:
            async with self._shared.redis.pipeline(transaction=False) as pipe:
                pipe.zadd(key, {host: now for host in hosts})
                pipe.zremrangebyrank(key, 0, -(self._max_hosts + 1))
                pipe.pexpire(key, SIGHTINGS_TTL_MS)
                await pipe.execute()
        except REDIS_FAILURES as exc:
            self._shared.mark_down(exc)
            return False
        return True

    async def seen_in_content(self, client: str, hosts: Iterable[str]) -> None:
        listed = list(hosts)
        if not await self._add("content", client, listed):
            self._shared.metrics.fallback("sightings", "local")
            await self._local.seen_in_content(client, listed)

    async def requested(self, client: str, host: str) -> None:
        if not await self._add("requested", client, [host]):
            self._shared.metrics.fallback("sightings", "local")
            await self._local.requested(client, host)

    async def only_from_content(self, client: str, host: str) -> bool:
        if self._shared.available:
            try:
                async with self._shared.redis.pipeline(transaction=False) as pipe:
                    pipe.zscore(self._key("content", client), host)
                    pipe.zscore(self._key("requested", client), host)
                    in_content, requested = await pipe.execute()
            except REDIS_FAILURES as exc:
                self._shared.mark_down(exc)
            else:
                if requested is not None:
                    return False
                if in_content is not None:
                    return True
        # Sightings recorded while Redis was down live here.
        return await self._local.only_from_content(client, host)
