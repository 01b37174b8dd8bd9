"""`build_engine`: the `search:` configuration section -> a ready `SearchEngine`.

Reads provider entries ({id, kind, base_url?, api_key_env?, secret_id_env?, secret_key_env?,
model?, retries?, backoff_ms?, allow_private?}; none: the automatic chain that follows the
keys set, `configload.providers.effective_providers`), API keys from the environment (never
from the file), the domain weights and region providers, and builds in-memory health and
cache stores unless shared ones are passed in. It does not validate the file's syntax: the
config loader does. A provider whose key is missing is logged as a warning here, once, and
never asked.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.config import SearchConfig
from gateway.configload.providers import effective_providers
from gateway.search.cache import InMemorySearchCache, SearchCache
from gateway.search.chain import ConfiguredProvider, RetryPolicy, SearchEngine, SearchOutcome
from gateway.search.fusion import DomainWeights
from gateway.search.health import HealthStore, InMemoryHealthStore
from gateway.search.providers import ADAPTERS

DEFAULTS = {"cache_ttl": 600.0, "timeout": 15.0, "deadline": 20.0}

log = logging.getLogger("gateway.search")


def build_engine(
    search_config: Any,
    transport: Any,
    clock: Callable[[], float],
    *,
    environ: Mapping[str, str] | None = None,
    health: HealthStore | None = None,
    cache: SearchCache[SearchOutcome] | None = None,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> SearchEngine:
    """`search_config` may be the parsed mapping or an object with the same attributes."""
    env = os.environ if environ is None else environ
    entries = chain_entries(search_config, env)
    providers = [_provider(entry, env) for entry in entries]
    cache_ttl = float(_read(search_config, "cache_ttl", DEFAULTS["cache_ttl"]))
    for provider in providers:
        if provider.key_missing:
            log.warning(
                "search provider %s (%s): no API key in %s; it is not asked until the key is "
                "set and the gateway restarted",
                provider.id,
                provider.kind,
                ", ".join(provider.missing_key_names) or "its environment variable",
            )
    return SearchEngine(
        providers,
        transport,
        health=health if health is not None else InMemoryHealthStore(clock),
        cache=cache if cache is not None else InMemorySearchCache(cache_ttl, clock),
        timeout=float(_read(search_config, "timeout", DEFAULTS["timeout"])),
        deadline=float(_read(search_config, "deadline", DEFAULTS["deadline"])),
        retry=retry,
        sleep=sleep,
        clock=clock,
        weights=DomainWeights.from_mapping(_read(search_config, "weights", None)),
        region_providers=_read(search_config, "region_providers", None),
        settings={
            "chain": "configured" if _read(search_config, "providers", None) else "automatic",
            "cache_ttl": cache_ttl,
            "weights": _read(search_config, "weights", None),
            "prefer": _read(search_config, "prefer", None),
        },
    )


def chain_entries(search_config: Any, environ: Mapping[str, str]) -> tuple[Any, ...]:
    """The providers as configured, or the automatic chain that follows the keys set."""
    providers = _read(search_config, "providers", None)
    if providers is not None:
        return tuple(providers)
    prefer = _read(search_config, "prefer", None)
    return effective_providers(SearchConfig(prefer=prefer), environ)


def _provider(entry: Any, env: Mapping[str, str]) -> ConfiguredProvider:
    pid = _read(entry, "id", None)
    kind = _read(entry, "kind", None)
    if not isinstance(pid, str) or not pid:
        raise ValueError("search.providers: every provider needs an id")
    adapter = ADAPTERS.get(kind) if isinstance(kind, str) else None
    if adapter is None:
        raise ValueError(
            f"search.providers[{pid}]: unknown kind {kind!r}; known: {', '.join(sorted(ADAPTERS))}"
        )
    key_env = _read(entry, "api_key_env", None) or _read(entry, "secret_key_env", None)
    id_env = _read(entry, "secret_id_env", None)
    backoff_ms = _read(entry, "backoff_ms", None)
    return ConfiguredProvider(
        id=pid,
        adapter=adapter,
        base_url=_read(entry, "base_url", None) or adapter.default_base_url,
        api_key=(env.get(key_env) or None) if key_env else None,
        api_key_env=key_env,
        allow_private=bool(_read(entry, "allow_private", False)),
        secret_id=(env.get(id_env) or None) if id_env else None,
        secret_id_env=id_env,
        model=_read(entry, "model", None),
        retries=int(_read(entry, "retries", 1)),
        backoff=float(backoff_ms) / 1000 if backoff_ms is not None else None,
    )


def _read(source: Any, name: str, default: Any) -> Any:
    if isinstance(source, Mapping):
        value = source.get(name, default)
    else:
        value = getattr(source, name, default)
    return default if value is None else value
