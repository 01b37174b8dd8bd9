"""The Redis connection of one process, and whether Redis answers right now.

Every store asks `available` before a round trip, so a Redis that is down costs a request
nothing (no connect timeout per request); a monitor pings it back up. The URL may carry a
password: only its host and port ever reach a log line or a status page.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import redis.asyncio as aioredis
import yarl
from redis.exceptions import RedisError

from gateway.metrics import Metrics

log = logging.getLogger("gateway.state")

SOCKET_TIMEOUT = 0.5
PING_WHEN_UP = 5.0
PING_WHEN_DOWN = 1.0
KEY_PREFIX = "gateway:"

# What a failed round trip may raise: the library's errors, and the socket's own.
REDIS_FAILURES: tuple[type[BaseException], ...] = (RedisError, OSError, TimeoutError)


def redis_location(url: str) -> str:
    """host:port/db of a redis:// URL, never its user info."""
    parsed = yarl.URL(url)
    return f"{parsed.scheme}://{parsed.host}:{parsed.port or 6379}{parsed.path or ''}"


class SharedState:
    """The client, the up/down view, and the failure mode (`closed` or `open`)."""

    def __init__(
        self,
        url: str,
        *,
        on_failure: str,
        instance_id: str,
        metrics: Metrics,
        client: aioredis.Redis | None = None,
    ) -> None:
        self.location = redis_location(url)
        self.fail_closed = on_failure != "open"
        self.instance_id = instance_id
        self.metrics = metrics
        self.redis = client or aioredis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
            retry_on_timeout=False,
            health_check_interval=0,
            decode_responses=False,
        )
        self._up = True  # until a round trip says otherwise
        self._last_error: str | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._closed = False
        self.metrics.set_redis_up(True)

    @property
    def available(self) -> bool:
        return self._up

    def key(self, *parts: str) -> str:
        return KEY_PREFIX + ":".join(parts)

    async def start(self) -> None:
        """Ping once (so /readyz and /metrics are right from the start), then keep watching."""
        try:
            await self.redis.ping()
        except REDIS_FAILURES as exc:
            self.mark_down(exc)
        else:
            log.info("shared state up", extra={"redis": self.location})
        self._ensure_monitor()

    async def close(self) -> None:
        self._closed = True  # a late failure must not start a new monitor nobody awaits
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
            self._monitor = None
        with contextlib.suppress(*REDIS_FAILURES):
            await self.redis.aclose()

    def mark_down(self, exc: BaseException) -> None:
        """A round trip failed: stores fall back until the monitor's ping succeeds."""
        self._last_error = type(exc).__name__
        if self._up:
            self._up = False
            self.metrics.set_redis_up(False)
            log.error(
                "shared state down",
                extra={
                    "redis": self.location,
                    "error": self._last_error,
                    "on_failure": "closed" if self.fail_closed else "open",
                },
            )
        self._ensure_monitor()

    def _mark_up(self) -> None:
        if not self._up:
            self._up = True
            self.metrics.set_redis_up(True)
            log.info("shared state up", extra={"redis": self.location})

    def _ensure_monitor(self) -> None:
        if self._closed:
            return
        if self._monitor is None or self._monitor.done():
            with contextlib.suppress(RuntimeError):  # no running loop: the next call starts it
                self._monitor = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(PING_WHEN_UP if self._up else PING_WHEN_DOWN)
            try:
                await self.redis.ping()
            except REDIS_FAILURES as exc:
                self.mark_down(exc)
            else:
                self._mark_up()

    def readiness_problem(self) -> str | None:
        """Not ready only when requests would be refused anyway (fail closed)."""
        if self._up or not self.fail_closed:
            return None
        return f"shared state (Redis at {self.location}) unreachable; state.on_failure is closed"

    def degradation(self) -> str | None:
        """Ready but degraded: Redis is down and `on_failure: open` lets requests pass."""
        if self._up or self.fail_closed:
            return None
        error = f" ({self._last_error})" if self._last_error else ""
        return (
            f"shared state down: Redis at {self.location} unreachable{error}; state.on_failure "
            "is open, so rate limits count in this process only and the search cache is skipped"
        )

    def status(self) -> dict[str, Any]:
        return {
            "redis": self.location,
            "up": self._up,
            "on_failure": "closed" if self.fail_closed else "open",
            "last_error": self._last_error,
        }
