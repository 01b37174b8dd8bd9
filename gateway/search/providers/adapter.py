"""`ProviderAdapter`: the three pure functions every provider module exports, and its defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.search.query import RawResult, SearchQuery
from gateway.search.transport import ProviderRequest, ProviderResponse


@dataclass(frozen=True, slots=True)
class ProviderAdapter:
    kind: str
    default_base_url: str  # the real public endpoint's origin; never contacted by tests
    needs_key: bool
    build_request: Callable[[SearchQuery, str, str | None], ProviderRequest]
    parse: Callable[[ProviderResponse], list[RawResult]]  # raises ProviderError
    applies_time_filter: Callable[[SearchQuery], bool]  # truthful freshness_applied


def endpoint(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + path
