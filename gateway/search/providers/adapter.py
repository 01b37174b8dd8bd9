"""`ProviderAdapter`: the three pure functions every provider module exports, its defaults, and
the request shapes they share (JSON POST, GET with a query string)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import orjson

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


def json_post(
    base_url: str, path: str, body: Mapping[str, Any], headers: Mapping[str, str]
) -> ProviderRequest:
    """POST of `body` as JSON to `path` under `base_url`, with `headers` after Content-Type."""
    return ProviderRequest(
        method="POST",
        url=endpoint(base_url, path),
        headers={"Content-Type": "application/json", **headers},
        body=orjson.dumps(body),
    )


def query_get(
    base_url: str, path: str, params: Mapping[str, str], headers: dict[str, str]
) -> ProviderRequest:
    """GET of `path` under `base_url` with `params` as its query string."""
    return ProviderRequest(
        method="GET", url=endpoint(base_url, path) + "?" + urlencode(params), headers=headers
    )


def bearer_json(api_key: str | None) -> dict[str, str]:
    """The headers of a JSON API that takes its key as a bearer token."""
    return {"Accept": "application/json", "Authorization": f"Bearer {api_key or ''}"}


def honours_time_filter(query: SearchQuery) -> bool:
    """For APIs that apply both freshness buckets and date ranges as asked."""
    return query.has_time_filter
