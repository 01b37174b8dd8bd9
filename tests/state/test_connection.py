"""`SharedState`: not ready only when Redis is down and fail-closed; degraded (still ready)
when it is down and fail-open; neither while it answers."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("on_failure", "redis_down", "not_ready", "degraded"),
    [
        pytest.param("closed", False, False, False, id="closed-up"),
        pytest.param("open", False, False, False, id="open-up"),
        pytest.param("closed", True, True, False, id="closed-down"),
        pytest.param("open", True, False, True, id="open-down"),
    ],
)
async def test_readiness_and_degradation(
    connect, redis_server, on_failure, redis_down, not_ready, degraded
) -> None:
    shared = await connect(on_failure=on_failure)
    if redis_down:
        await redis_server.stop()
        await shared.start()  # its ping fails: marked down
    assert shared.available is not redis_down
    problem, degradation = shared.readiness_problem(), shared.degradation()
    assert (problem is not None, degradation is not None) == (not_ready, degraded)
    if degradation is not None:
        assert degradation.startswith(f"shared state down: Redis at {shared.location} unreachable")
        assert "ConnectionError" in degradation and "on_failure is open" in degradation
