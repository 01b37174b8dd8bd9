"""Building the Redis-backed stores from `state.redis`, for the composition root."""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.config import GatewayConfig
from gateway.metrics import Metrics
from gateway.search.chain import SearchOutcome
from gateway.state.connection import SharedState
from gateway.state.limiter import RedisLimiter
from gateway.state.sightings import RedisHostSightings
from gateway.state.stores import RedisHealthStore, RedisIdStore, RedisSearchCache


@dataclass(frozen=True, slots=True)
class SharedStores:
    state: SharedState
    limiter: RedisLimiter
    ids: RedisIdStore
    health: RedisHealthStore
    search_cache: RedisSearchCache[SearchOutcome]
    sightings: RedisHostSightings

    async def start(self) -> None:
        await self.state.start()

    async def close(self) -> None:
        await self.limiter.close()
        await self.state.close()


def connect_shared_state(
    config: GatewayConfig, instance_id: str, metrics: Metrics
) -> SharedStores | None:
    """None without `state.redis`; connecting is lazy (the first round trip, or `start`)."""
    if config.state.redis is None:
        return None
    state = SharedState(
        config.state.redis,
        on_failure=config.state.on_failure,
        instance_id=instance_id,
        metrics=metrics,
    )
    return SharedStores(
        state=state,
        limiter=RedisLimiter(state),
        ids=RedisIdStore(state, config.search.id_ttl, time.monotonic),
        health=RedisHealthStore(state, time.time),
        search_cache=RedisSearchCache(
            state,
            config.search.cache_ttl,
            encode=SearchOutcome.to_dict,
            decode=SearchOutcome.from_dict,
        ),
        sightings=RedisHostSightings(state),
    )
