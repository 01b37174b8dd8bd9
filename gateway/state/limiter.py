"""`RedisLimiter`: per-client rate and concurrency limits counted across replicas.

One EVALSHA per admitted request: a Lua script (atomic in Redis, on Redis's own clock) drops
expired entries, checks the concurrency cap and the rolling 60 s window, records the request
and takes a lease, and also gives back the leases released since the last call, so the
common path is one round trip. Leases carry a TTL (renewed while held) so a crashed
replica's leases expire. Redis down: refuse with `unavailable` (on_failure: closed) or count
in this process only (open).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from gateway.config import ClientLimits
from gateway.errors import RateLimitedError, UnavailableError
from gateway.limits import FREE_LEASE, WINDOW_S, InMemoryLimiter, Lease
from gateway.state.connection import REDIS_FAILURES, SharedState

LEASE_TTL_S = 60.0
RELEASE_DELAY_S = 0.02  # an idle replica gives leases back this soon; busy ones piggy-back
UNAVAILABLE_RETRY_S = 5.0

# KEYS[1]: the client's window (zset of request ids scored by start ms), KEYS[2]: its leases
# (zset scored by expiry ms), KEYS[3..]: lease sets of the releases carried along.
# ARGV: rpm, concurrent (0 = no cap), window ms, lease ttl ms, this request's id, released ids.
# Returns {0, 0} admitted, {1, retry ms} over the rate, {2, retry ms} over the concurrency.
ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 6, #ARGV do
  redis.call('ZREM', KEYS[i - 3], ARGV[i])
end
local rpm = tonumber(ARGV[1])
local conc = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc then
    return {2, 1000}
  end
end
if rpm > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  local n = redis.call('ZCARD', KEYS[1])
  if n >= rpm then
    local oldest = redis.call('ZRANGE', KEYS[1], n - rpm, n - rpm, 'WITHSCORES')
    return {1, tonumber(oldest[2]) + window - now}
  end
  redis.call('ZADD', KEYS[1], now, ARGV[5])
  redis.call('PEXPIRE', KEYS[1], window)
end
if conc > 0 then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[5])
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {0, 0}
"""

# KEYS: lease sets; ARGV[1]: ttl ms, ARGV[2..]: lease ids (one per key). Extends held leases.
RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[i - 1], 'XX', now + ttl, ARGV[i])
  redis.call('PEXPIRE', KEYS[i - 1], ttl)
end
return 0
"""


# KEYS: lease sets; ARGV: lease ids (one per key). Gives leases back.
RELEASE = """
for i = 1, #ARGV do
  redis.call('ZREM', KEYS[i], ARGV[i])
end
return 0
"""


class _RedisLease:
    __slots__ = ("_limiter", "_key", "_lease_id", "_released")

    def __init__(self, limiter: RedisLimiter, key: str, lease_id: str) -> None:
        self._limiter = limiter
        self._key = key
        self._lease_id = lease_id
        self._released = False

    async def release(self) -> None:
        if not self._released:
            self._released = True
            self._limiter._release(self._key, self._lease_id)


class RedisLimiter:
    """The `Limiter` of gateway/limits.py, shared through Redis."""

    def __init__(
        self,
        shared: SharedState,
        *,
        fallback: InMemoryLimiter | None = None,
        lease_ttl: float = LEASE_TTL_S,
    ) -> None:
        self._shared = shared
        self._fallback = fallback or InMemoryLimiter()
        self._lease_ttl_ms = int(lease_ttl * 1000)
        self._acquire = shared.redis.register_script(ACQUIRE)
        self._renew = shared.redis.register_script(RENEW)
        self._give_back = shared.redis.register_script(RELEASE)
        self._pending: list[tuple[str, str]] = []  # (lease key, lease id) to give back
        self._held: dict[str, str] = {}  # lease id -> lease key, for renewal
        self._flusher: asyncio.TimerHandle | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._flushes: set[asyncio.Task[None]] = set()  # releases on their way to Redis

    async def acquire(self, client_id: str, limits: ClientLimits) -> Lease:
        rpm, concurrent = limits.requests_per_minute, limits.concurrent
        if rpm is None and concurrent is None:
            return FREE_LEASE
        if not self._shared.available:
            return await self._without_redis(client_id, limits)
        window_key = self._shared.key("rate", client_id)
        lease_key = self._shared.key("leases", client_id)
        lease_id = f"{self._shared.instance_id}:{uuid.uuid4().hex}"
        releases, self._pending = self._pending, []
        if self._flusher is not None:
            # This call carries them: the next release starts its own wait, so a steady load
            # never pays a separate round trip for releases.
            self._flusher.cancel()
            self._flusher = None
        keys = [window_key, lease_key, *(key for key, _ in releases)]
        args: list[Any] = [rpm or 0, concurrent or 0, int(WINDOW_S * 1000), self._lease_ttl_ms]
        args.append(lease_id)
        args.extend(lease for _, lease in releases)
        try:
            verdict, retry_ms = await self._acquire(keys=keys, args=args)
        except REDIS_FAILURES as exc:
            self._shared.mark_down(exc)
            return await self._without_redis(client_id, limits)
        if verdict == 1:
            raise RateLimitedError(
                f"client {client_id!r} made {rpm} requests in the last 60 s "
                f"(limits.requests_per_minute: {rpm}; counted across replicas)",
                retry_after=max(int(retry_ms), 1) / 1000,
            )
        if verdict == 2:
            raise RateLimitedError(
                f"client {client_id!r} already has {concurrent} requests or tunnels in flight "
                f"(limits.concurrent: {concurrent}; counted across replicas)",
                retry_after=max(int(retry_ms), 1) / 1000,
            )
        if concurrent is None:
            return FREE_LEASE
        self._held[lease_id] = lease_key
        self._ensure_renewer()
        return _RedisLease(self, lease_key, lease_id)

    async def _without_redis(self, client_id: str, limits: ClientLimits) -> Lease:
        metrics = self._shared.metrics
        if self._shared.fail_closed:
            metrics.fallback("limits", "refused")
            raise UnavailableError(
                "shared state (Redis) is unreachable, so rate limits cannot be counted across "
                "replicas; refusing (state.on_failure: closed)",
                retry_after=UNAVAILABLE_RETRY_S,
            )
        metrics.fallback("limits", "local")
        return await self._fallback.acquire(client_id, limits)

    # -- releases, batched onto the next acquire ---------------------------------------------

    def _release(self, key: str, lease_id: str) -> None:
        self._held.pop(lease_id, None)
        if not self._shared.available:
            return  # its TTL ends it
        self._pending.append((key, lease_id))
        if self._flusher is None:
            loop = asyncio.get_running_loop()
            self._flusher = loop.call_later(RELEASE_DELAY_S, self._flush_soon)

    def _flush_soon(self) -> None:
        self._flusher = None
        if self._pending:
            # Kept until it ends, so `close` can wait for the releases it gives back.
            task = asyncio.get_running_loop().create_task(self.flush())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        """Give back the released leases no acquire has carried along yet."""
        releases, self._pending = self._pending, []
        if not releases or not self._shared.available:
            return
        try:
            await self._give_back(
                keys=[key for key, _ in releases], args=[lease for _, lease in releases]
            )
        except REDIS_FAILURES as exc:
            self._shared.mark_down(exc)

    # -- renewal of long-held leases ---------------------------------------------------------

    def _ensure_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._renew_held())

    async def _renew_held(self) -> None:
        while self._held:
            await asyncio.sleep(self._lease_ttl_ms / 3000)
            held = list(self._held.items())
            if not held or not self._shared.available:
                continue
            try:
                await self._renew(
                    keys=[key for _, key in held],
                    args=[self._lease_ttl_ms, *(lease for lease, _ in held)],
                )
            except REDIS_FAILURES as exc:
                self._shared.mark_down(exc)

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        await self.flush()
