"""Search provider adapters, one module each, and the registry of kinds.

A provider only builds requests and parses responses (pure functions); the chain sends them
through the gateway's outbound transport. Adding a provider: a module with an `ADAPTER`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gateway.search.providers import (
    anthropic,
    baidu,
    bing,
    bocha,
    brave,
    duckduckgo,
    openai,
    searxng,
    serper,
    tavily,
    tencent_wsa,
)
from gateway.search.providers.adapter import ProviderAdapter

ADAPTERS: Mapping[str, ProviderAdapter] = MappingProxyType(
    {
        module.ADAPTER.kind: module.ADAPTER
        for module in (
            duckduckgo,
            bing,
            baidu,
            brave,
            tavily,
            serper,
            bocha,
            searxng,
            tencent_wsa,
            openai,
            anthropic,
        )  # fmt: skip
    }
)

__all__ = ["ADAPTERS", "ProviderAdapter"]
