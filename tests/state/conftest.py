"""A real redis-server per test (loopback, no persistence), and shared-state connections to it."""

from __future__ import annotations

import pytest

from gateway.metrics import Metrics
from gateway.state.connection import SharedState


@pytest.fixture
async def connect(redis_server):
    """connect(instance, on_failure="closed") -> a SharedState, as one replica would hold."""
    opened: list[SharedState] = []

    async def make(instance: str = "replica-a", on_failure: str = "closed") -> SharedState:
        metrics = Metrics(instance_id=instance, version="test", shared_state=True)
        shared = SharedState(
            redis_server.url, on_failure=on_failure, instance_id=instance, metrics=metrics
        )
        await shared.start()
        opened.append(shared)
        return shared

    yield make
    for shared in opened:
        await shared.close()
