"""Passive provider health: untested | healthy | degraded | cooling, from what searches saw.

`next_health` is the pure transition (clock value passed in); a `HealthStore` keeps one record
per provider (in memory here; a shared one implements the same async interface). Rules:
success -> healthy; a rate limit or a block (captcha) cools for its Retry-After (default 60 s,
capped at 600 s); any other failure -> degraded, and the second in a row cools for 60 s. A
cooled provider that fails again cools again; one success clears everything.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from gateway.search.failures import ErrorClass
from gateway.search.transport import MAX_RETRY_AFTER

DEFAULT_RATE_LIMIT_COOLING = 60.0
MAX_COOLING = MAX_RETRY_AFTER
FAILURE_COOLING = 60.0
FAILURES_BEFORE_COOLING = 2

Clock = Callable[[], float]  # seconds since the epoch


class HealthState(StrEnum):
    UNTESTED = "untested"
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    COOLING = "cooling"


@dataclass(frozen=True, slots=True)
class ProviderHealth:
    """What is remembered about one provider; `state_at(now)` reads it at a given time."""

    tested: bool = False
    consecutive_failures: int = 0
    cooling_until: float | None = None
    last_error: ErrorClass | None = None

    def state_at(self, now: float) -> HealthState:
        if not self.tested:
            return HealthState.UNTESTED
        if self.cooling_until is not None and now < self.cooling_until:
            return HealthState.COOLING
        return HealthState.DEGRADED if self.consecutive_failures else HealthState.HEALTHY

    def describe(self, provider_id: str, now: float) -> dict[str, Any]:
        """The /v1/status entry for this provider."""
        state = self.state_at(now)
        return {
            "id": provider_id,
            "state": str(state),
            "cooling_until": (
                iso_time(self.cooling_until)
                if state is HealthState.COOLING and self.cooling_until is not None
                else None
            ),
            "consecutive_failures": self.consecutive_failures,
            "last_error": str(self.last_error) if self.last_error else None,
        }


def next_health(
    current: ProviderHealth,
    now: float,
    *,
    error_class: ErrorClass | None = None,
    retry_after: float | None = None,
) -> ProviderHealth:
    """The record after one outcome: a success (error_class None) or a failure of that class."""
    if error_class is None:
        return ProviderHealth(tested=True)
    failures = current.consecutive_failures + 1
    cooling_until = current.cooling_until
    if error_class in (ErrorClass.RATE_LIMITED, ErrorClass.BLOCKED):
        wait = DEFAULT_RATE_LIMIT_COOLING if retry_after is None else retry_after
        cooling_until = now + min(max(wait, 0.0), MAX_COOLING)
    elif failures >= FAILURES_BEFORE_COOLING:
        cooling_until = now + FAILURE_COOLING
    return ProviderHealth(
        tested=True,
        consecutive_failures=failures,
        cooling_until=cooling_until,
        last_error=error_class,
    )


def iso_time(epoch_seconds: float) -> str:
    moment = datetime.fromtimestamp(epoch_seconds, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


class HealthStore(Protocol):
    async def get(self, provider_id: str) -> ProviderHealth: ...

    async def record_success(self, provider_id: str) -> ProviderHealth: ...

    async def record_failure(
        self, provider_id: str, error_class: ErrorClass, retry_after: float | None = None
    ) -> ProviderHealth: ...

    async def snapshot(self, provider_ids: Sequence[str]) -> list[dict[str, Any]]: ...


class InMemoryHealthStore:
    """One process's view of provider health; bounded by the configured provider count."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._records: dict[str, ProviderHealth] = {}

    def now(self) -> float:
        return self._clock()

    async def get(self, provider_id: str) -> ProviderHealth:
        return self._records.get(provider_id, ProviderHealth())

    async def record_success(self, provider_id: str) -> ProviderHealth:
        record = next_health(self._records.get(provider_id, ProviderHealth()), self._clock())
        self._records[provider_id] = record
        return record

    async def record_failure(
        self, provider_id: str, error_class: ErrorClass, retry_after: float | None = None
    ) -> ProviderHealth:
        current = self._records.get(provider_id, ProviderHealth())
        record = next_health(
            current, self._clock(), error_class=error_class, retry_after=retry_after
        )
        self._records[provider_id] = record
        return record

    async def snapshot(self, provider_ids: Sequence[str]) -> list[dict[str, Any]]:
        now = self._clock()
        return [self._records.get(pid, ProviderHealth()).describe(pid, now) for pid in provider_ids]
