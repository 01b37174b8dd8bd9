"""`ProviderAdapter`: the pure functions every provider module exports, its defaults, and
the request shapes they share (JSON POST, GET with a query string).

Most providers need only a base URL and an API key (`build_request`); those that need more
(a model name, a signing secret and the time) build from `ProviderSettings` instead. A
model-native provider also reads the model's own prose (`parse_answer`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson

from gateway.search.query import RawResult, SearchQuery
from gateway.search.transport import ProviderRequest, ProviderResponse


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """What one configured provider's requests are built from."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)  # the secret key of a key pair
    secret_id: str | None = field(default=None, repr=False)  # the id of a key pair
    model: str | None = None
    now: float = 0.0  # seconds since the epoch when the request is built (signatures)


@dataclass(frozen=True, slots=True)
class ProviderAdapter:
    kind: str
    default_base_url: str  # the real public endpoint's origin; never contacted by tests
    needs_key: bool
    build_request: Callable[[SearchQuery, str, str | None], ProviderRequest]
    parse: Callable[[ProviderResponse], list[RawResult]]  # raises ProviderError
    applies_time_filter: Callable[[SearchQuery], bool]  # truthful freshness_applied
    build_from_settings: Callable[[SearchQuery, ProviderSettings], ProviderRequest] | None = None
    parse_answer: Callable[[ProviderResponse], str | None] | None = None
    default_model: str | None = None
    # The provider's estimate of how many results there are, where it gives one.
    parse_total: Callable[[ProviderResponse], int | None] | None = None

    def request(self, query: SearchQuery, settings: ProviderSettings) -> ProviderRequest:
        if self.build_from_settings is not None:
            return self.build_from_settings(query, settings)
        return self.build_request(query, settings.base_url, settings.api_key)


def settings_adapter(
    kind: str,
    default_base_url: str,
    build: Callable[[SearchQuery, ProviderSettings], ProviderRequest],
    parse: Callable[[ProviderResponse], list[RawResult]],
    applies_time_filter: Callable[[SearchQuery], bool],
    *,
    parse_answer: Callable[[ProviderResponse], str | None] | None = None,
    default_model: str | None = None,
) -> ProviderAdapter:
    """The adapter of a keyed provider that builds its requests from `ProviderSettings`;
    its `build_request` (base URL and key only) builds them at the current time."""

    def build_request(query: SearchQuery, base_url: str, api_key: str | None) -> ProviderRequest:
        return build(query, ProviderSettings(base_url, api_key, now=time.time()))

    return ProviderAdapter(
        kind=kind,
        default_base_url=default_base_url,
        needs_key=True,
        build_request=build_request,
        parse=parse,
        applies_time_filter=applies_time_filter,
        build_from_settings=build,
        parse_answer=parse_answer,
        default_model=default_model,
    )


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
