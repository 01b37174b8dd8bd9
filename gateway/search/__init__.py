"""Web search: provider adapters, the chain with passive health, canonical URLs, the cache;
several phrasings fused (fusion.py), near-duplicates merged (dedupe.py), and Research's
passages cut and ranked (passages.py).

Egress only through an injected `ProviderTransport` (the gateway's pinned client); policy
filtering of result URLs, envelopes and markers belong to the tools above this package.
`assembly.build_engine` (the engine from the gateway configuration) is not loaded here, so
the tools that use this package never load the configuration.
"""

from __future__ import annotations

from gateway.search.cache import CacheStats, InMemorySearchCache, SearchCache
from gateway.search.canonical import SearchResult, canonical_url, result_id
from gateway.search.chain import ConfiguredProvider, RetryPolicy, SearchEngine, SearchOutcome
from gateway.search.failures import ErrorClass, ProviderError
from gateway.search.health import HealthState, HealthStore, InMemoryHealthStore
from gateway.search.ids import IdStore, InMemoryIdStore
from gateway.search.query import Freshness, RawResult, SearchQuery
from gateway.search.transport import (
    ProviderRequest,
    ProviderResponse,
    ProviderTransport,
    ProviderTransportError,
)

__all__ = [
    "CacheStats",
    "ConfiguredProvider",
    "ErrorClass",
    "Freshness",
    "HealthState",
    "HealthStore",
    "IdStore",
    "InMemoryHealthStore",
    "InMemoryIdStore",
    "InMemorySearchCache",
    "ProviderError",
    "ProviderRequest",
    "ProviderResponse",
    "ProviderTransport",
    "ProviderTransportError",
    "RawResult",
    "RetryPolicy",
    "SearchCache",
    "SearchEngine",
    "SearchOutcome",
    "SearchQuery",
    "SearchResult",
    "canonical_url",
    "result_id",
]
