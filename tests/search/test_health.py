from __future__ import annotations

import pytest

from gateway.search.failures import ErrorClass
from gateway.search.health import (
    HealthState,
    InMemoryHealthStore,
    ProviderHealth,
    next_health,
)

T0 = 1_800_000_000.0


@pytest.mark.parametrize(
    ("events", "at", "state", "cooling_left"),
    [
        pytest.param([], 0, HealthState.UNTESTED, None, id="untested"),
        pytest.param([None], 0, HealthState.HEALTHY, None, id="success"),
        pytest.param([ErrorClass.TIMEOUT], 0, HealthState.DEGRADED, None, id="one-failure"),
        pytest.param([ErrorClass.TIMEOUT, ErrorClass.SERVER_ERROR], 0, HealthState.COOLING, 60,
                     id="two-failures-cool-60"),
        pytest.param([ErrorClass.TIMEOUT, ErrorClass.SERVER_ERROR], 60, HealthState.DEGRADED, None,
                     id="cooling-ends-degraded"),
        pytest.param([ErrorClass.TIMEOUT, None], 0, HealthState.HEALTHY, None,
                     id="success-clears"),
        pytest.param([ErrorClass.TIMEOUT, None, ErrorClass.NETWORK], 0, HealthState.DEGRADED, None,
                     id="not-consecutive"),
        pytest.param([(ErrorClass.RATE_LIMITED, None)], 0, HealthState.COOLING, 60,
                     id="rate-limit-default-60"),
        pytest.param([(ErrorClass.RATE_LIMITED, 5.0)], 0, HealthState.COOLING, 5,
                     id="rate-limit-retry-after"),
        pytest.param([(ErrorClass.RATE_LIMITED, 86400.0)], 0, HealthState.COOLING, 600,
                     id="rate-limit-capped"),
        pytest.param([(ErrorClass.RATE_LIMITED, 5.0)], 5, HealthState.DEGRADED, None,
                     id="rate-limit-over"),
    ],
)  # fmt: skip
def test_transitions(events: list, at: float, state: HealthState, cooling_left: float) -> None:
    health = ProviderHealth()
    for event in events:
        cls, retry_after = event if isinstance(event, tuple) else (event, None)
        health = next_health(health, T0, error_class=cls, retry_after=retry_after)
    assert health.state_at(T0 + at) is state
    if cooling_left is not None:
        assert health.cooling_until == T0 + cooling_left


def test_failure_after_cooling_cools_again() -> None:
    health = ProviderHealth()
    for cls in (ErrorClass.TIMEOUT, ErrorClass.TIMEOUT):
        health = next_health(health, T0, error_class=cls)
    health = next_health(health, T0 + 61, error_class=ErrorClass.NETWORK)
    assert health.state_at(T0 + 62) is HealthState.COOLING
    assert health.cooling_until == T0 + 121


async def test_store_and_snapshot(clock) -> None:  # type: ignore[no-untyped-def]
    store = InMemoryHealthStore(clock)
    await store.record_success("ddg")
    await store.record_failure("brave", ErrorClass.RATE_LIMITED, 30)
    snapshot = await store.snapshot(["ddg", "brave", "tavily"])
    assert snapshot == [
        {"id": "ddg", "state": "healthy", "cooling_until": None, "consecutive_failures": 0,
         "last_error": None},
        {"id": "brave", "state": "cooling", "cooling_until": "2027-01-15T08:00:30Z",
         "consecutive_failures": 1, "last_error": "rate_limited"},
        {"id": "tavily", "state": "untested", "cooling_until": None, "consecutive_failures": 0,
         "last_error": None},
    ]  # fmt: skip
    clock.advance(31)
    assert (await store.get("brave")).state_at(clock()) is HealthState.DEGRADED
    assert (await store.snapshot(["brave"]))[0]["cooling_until"] is None
