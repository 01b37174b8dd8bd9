"""Redis-backed search cache, provider health and result ids: the async interfaces of
gateway/search (`SearchCache`, `HealthStore`, `IdStore`), shared by every replica.

Values are JSON (never pickle: whoever can write to Redis must not be able to run code here).
While Redis is down the cache is skipped and health lives in this process until it is back,
so searching keeps working on one replica's view; ids do too with `on_failure: open`, and
with `closed` storing them fails the search (`UnavailableError`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

import orjson
from redis.exceptions import WatchError

from gateway.errors import UnavailableError
from gateway.search.cache import CacheStats
from gateway.search.failures import ErrorClass
from gateway.search.health import Clock, InMemoryHealthStore, ProviderHealth, next_health
from gateway.search.ids import InMemoryIdStore
from gateway.state.connection import REDIS_FAILURES, SharedState

V = TypeVar("V")
HEALTH_TTL_S = 86_400  # a provider nobody asked for a day starts untested again
HEALTH_RETRIES = 8
IDS_UNAVAILABLE_RETRY_S = 5.0
STATS_SCAN_LIMIT = 10  # SCAN calls per stats() at most: the entry count is approximate


class RedisSearchCache(Generic[V]):
    """A TTL cache keyed like gateway/search/cache.py; `ttl <= 0` turns it off."""

    def __init__(
        self,
        shared: SharedState,
        ttl: float,
        *,
        encode: Callable[[V], Any],
        decode: Callable[[Any], V],
    ) -> None:
        self._shared = shared
        self._ttl_ms = int(ttl * 1000)
        self._encode = encode
        self._decode = decode
        self._hits = 0
        self._misses = 0

    async def get(self, key: str) -> V | None:
        if self._ttl_ms <= 0:
            self._misses += 1
            return None
        if not self._shared.available:
            self._shared.metrics.fallback("search_cache", "skipped")
            self._misses += 1
            return None
        try:
            raw = await self._shared.redis.get(self._shared.key("search", key))
        except REDIS_FAILURES as exc:
            self._shared.mark_down(exc)
            self._misses += 1
            return None
        if raw is None:
            self._misses += 1
            return None
        try:
            value = self._decode(orjson.loads(raw))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            self._misses += 1  # a foreign or older value: a miss, and overwritten on put
            return None
        self._hits += 1
        return value

    async def put(self, key: str, value: V) -> None:
        if self._ttl_ms <= 0 or not self._shared.available:
            return
        try:
            await self._shared.redis.set(
                self._shared.key("search", key), orjson.dumps(self._encode(value)), px=self._ttl_ms
            )
        except REDIS_FAILURES as exc:
            self._shared.mark_down(exc)

    async def stats(self) -> CacheStats:
        entries = 0
        if self._shared.available:
            try:
                cursor: int = 0
                for _ in range(STATS_SCAN_LIMIT):
                    cursor, keys = await self._shared.redis.scan(
                        cursor, match=self._shared.key("search", "*"), count=1000
                    )
                    entries += len(keys)
                    if not cursor:
                        break
            except REDIS_FAILURES as exc:
                self._shared.mark_down(exc)
        return CacheStats(self._hits, self._misses, entries)


def _health_to_json(record: ProviderHealth) -> bytes:
    return orjson.dumps(
        {
            "tested": record.tested,
            "failures": record.consecutive_failures,
            "cooling_until": record.cooling_until,
            "last_error": str(record.last_error) if record.last_error else None,
        }
    )


def _health_from_json(raw: bytes | str | None) -> ProviderHealth:
    if raw is None:
        return ProviderHealth()
    try:
        data = orjson.loads(raw)
        return ProviderHealth(
            tested=bool(data["tested"]),
            consecutive_failures=int(data["failures"]),
            cooling_until=float(data["cooling_until"])
            if data["cooling_until"] is not None
            else None,
            last_error=ErrorClass(data["last_error"]) if data["last_error"] else None,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return ProviderHealth()


class RedisHealthStore:
    """Provider health shared by replicas: one replica's cooling is every replica's.

    Transitions are `next_health`, applied under WATCH so two replicas failing at once both
    count. The clock is wall time, since replicas compare each other's deadlines.
    """

    def __init__(self, shared: SharedState, clock: Clock) -> None:
        self._shared = shared
        self._clock = clock
        self._local = InMemoryHealthStore(clock)

    def now(self) -> float:
        return self._clock()

    def _key(self, provider_id: str) -> str:
        return self._shared.key("health", provider_id)

    async def get(self, provider_id: str) -> ProviderHealth:
        if not self._shared.available:
            return await self._local.get(provider_id)
        try:
            return _health_from_json(await self._shared.redis.get(self._key(provider_id)))
        except REDIS_FAILURES as exc:
            self._shared.mark_down(exc)
            return await self._local.get(provider_id)

    async def record_success(self, provider_id: str) -> ProviderHealth:
        record = next_health(ProviderHealth(), self._clock())
        await self._local.record_success(provider_id)
        if self._shared.available:
            try:
                await self._shared.redis.set(
                    self._key(provider_id), _health_to_json(record), ex=HEALTH_TTL_S
                )
            except REDIS_FAILURES as exc:
                self._shared.mark_down(exc)
        return record

    async def record_failure(
        self, provider_id: str, error_class: ErrorClass, retry_after: float | None = None
    ) -> ProviderHealth:
        local = await self._local.record_failure(provider_id, error_class, retry_after)
        if not self._shared.available:
            return local
        key = self._key(provider_id)
        try:
            for _ in range(HEALTH_RETRIES):
                async with self._shared.redis.pipeline(transaction=True) as pipe:
                    try:
                        await pipe.watch(key)
                        current = _health_from_json(await pipe.get(key))
                        record = next_health(
                            current, self._clock(), error_class=error_class, retry_after=retry_after
                        )
                        pipe.multi()
                        pipe.set(key, _health_to_json(record), ex=HEALTH_TTL_S)
                        await pipe.execute()
                        return record
                    except WatchError:
                        continue
        except REDIS_FAILURES as exc:
            self._shared.mark_down(exc)
        return local

    async def snapshot(self, provider_ids: Sequence[str]) -> list[dict[str, Any]]:
        if not provider_ids:
            return []
        if self._shared.available:
            try:
                raws = await self._shared.redis.mget([self._key(p) for p in provider_ids])
            except REDIS_FAILURES as exc:
                self._shared.mark_down(exc)
            else:
                now = self._clock()
                return [
                    _health_from_json(raw).describe(pid, now)
                    for pid, raw in zip(provider_ids, raws, strict=True)
                ]
        return await self._local.snapshot(provider_ids)


class RedisIdStore:
    """(client, result id) -> canonical URL with a TTL, readable by every replica."""

    def __init__(self, shared: SharedState, ttl: float, clock: Callable[[], float]) -> None:
        self._shared = shared
        self._ttl_ms = max(1, int(ttl * 1000))
        self._local = InMemoryIdStore(ttl=ttl, clock=clock)

    def _key(self, client_id: str, result_id: str) -> str:
        return self._shared.key("id", client_id, result_id)

    async def remember(self, client_id: str, entries: Iterable[tuple[str, str]]) -> None:
        pairs = list(entries)
        if not pairs:
            return
        if self._shared.available:
            try:
                async with self._shared.redis.pipeline(transaction=False) as pipe:
                    for result_id, url in pairs:
                        pipe.set(self._key(client_id, result_id), url.encode(), px=self._ttl_ms)
                    await pipe.execute()
                return
            except REDIS_FAILURES as exc:
                self._shared.mark_down(exc)
        if self._shared.fail_closed:
            # Kept here, the ids would be unknown to every other worker and replica: the
            # search fails rather than hand out ids a later fetch may not find.
            self._shared.metrics.fallback("ids", "refused")
            raise UnavailableError(
                "shared state (Redis) is unreachable, so the search result ids cannot be "
                "stored for every replica; refusing (state.on_failure: closed)",
                retry_after=IDS_UNAVAILABLE_RETRY_S,
            )
        self._shared.metrics.fallback("ids", "local")
        await self._local.remember(client_id, pairs)

    async def resolve(self, client_id: str, result_id: str) -> str | None:
        if self._shared.available:
            try:
                raw = await self._shared.redis.get(self._key(client_id, result_id))
            except REDIS_FAILURES as exc:
                self._shared.mark_down(exc)
            else:
                if raw is not None:
                    return raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
        # Ids remembered while Redis was down live here.
        return await self._local.resolve(client_id, result_id)
