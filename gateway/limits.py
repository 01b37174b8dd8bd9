"""Per-client limits: at most N requests in any rolling 60 s, and a cap on
requests and tunnels in flight.

Callers (the API middleware, MCP, the forward proxy) see only `Limiter` and `Lease`;
`InMemoryLimiter` counts inside this process. A shared implementation (Redis, for several
workers or replicas) implements the same two protocols and is injected in `runtime`.
This module never decides who the client is: it is handed an id and that client's limits.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from gateway.errors import RateLimitedError

if TYPE_CHECKING:  # annotations only: the tools that hold leases never load the configuration
    from gateway.config import ClientLimits

WINDOW_S = 60.0
CONCURRENCY_RETRY_S = 1.0


class Lease(Protocol):
    """One admitted request or tunnel; `release` when it ends (idempotent)."""

    async def release(self) -> None: ...


class Limiter(Protocol):
    async def acquire(self, client_id: str, limits: ClientLimits) -> Lease:
        """Admit one request or tunnel, or raise RateLimitedError(retry_after=…) (or
        UnavailableError when a shared store is down and fails closed)."""
        ...


class _FreeLease:
    """For clients without limits: nothing to give back."""

    __slots__ = ()

    async def release(self) -> None:
        return None


FREE_LEASE: Lease = _FreeLease()


class _InMemoryLease:
    __slots__ = ("_limiter", "_client_id", "_released")

    def __init__(self, limiter: InMemoryLimiter, client_id: str) -> None:
        self._limiter = limiter
        self._client_id = client_id
        self._released = False

    async def release(self) -> None:
        if not self._released:
            self._released = True
            self._limiter._done(self._client_id)


class InMemoryLimiter:
    """Exact rolling window: the start times of the last N admitted requests per client.

    A request is admitted when fewer than N started in the last 60 s, so a burst of N is
    fine and the N+1st waits until the oldest of them is 60 s old (its Retry-After).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._starts: dict[str, deque[float]] = {}
        self._in_flight: dict[str, int] = {}

    async def acquire(self, client_id: str, limits: ClientLimits) -> Lease:
        return self.acquire_now(client_id, limits)

    def acquire_now(self, client_id: str, limits: ClientLimits) -> Lease:
        """The same as `acquire`, for callers on the event loop that cannot await."""
        rpm, concurrent = limits.requests_per_minute, limits.concurrent
        if rpm is None and concurrent is None:
            return FREE_LEASE
        in_flight = self._in_flight.get(client_id, 0)
        if concurrent is not None and in_flight >= concurrent:
            raise RateLimitedError(
                f"client {client_id!r} already has {in_flight} requests or tunnels in flight "
                f"(limits.concurrent: {concurrent})",
                retry_after=CONCURRENCY_RETRY_S,
            )
        now = self._clock()
        if rpm is not None:
            starts = self._starts.get(client_id)
            if starts is None:
                starts = self._starts[client_id] = deque()
            horizon = now - WINDOW_S
            while starts and starts[0] <= horizon:
                starts.popleft()
            if len(starts) >= rpm:
                raise RateLimitedError(
                    f"client {client_id!r} made {rpm} requests in the last 60 s "
                    f"(limits.requests_per_minute: {rpm})",
                    retry_after=max(starts[len(starts) - rpm] - horizon, 0.001),
                )
            starts.append(now)
        self._in_flight[client_id] = in_flight + 1
        return _InMemoryLease(self, client_id)

    def in_flight(self, client_id: str) -> int:
        return self._in_flight.get(client_id, 0)

    def _done(self, client_id: str) -> None:
        left = self._in_flight.get(client_id, 0) - 1
        if left > 0:
            self._in_flight[client_id] = left
        else:
            self._in_flight.pop(client_id, None)
