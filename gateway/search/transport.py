"""The one door providers have to the network: request/response values and the transport Protocol.

Providers only build `ProviderRequest`s and parse `ProviderResponse`s; they never open sockets.
The gateway's pinned outbound client implements `ProviderTransport` (no redirects, 5 MiB cap).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    method: str
    url: str
    headers: Mapping[str, str] = field(repr=False)  # may carry the API key
    body: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class ProviderResponse:
    status: int
    headers: Mapping[str, str]  # case-insensitive (a CIMultiDict or alike)
    body: bytes = field(repr=False)


class ProviderTransportError(Exception):
    """The request got no response: `error_class` is "timeout" or "network"."""

    def __init__(self, error_class: str, message: str = "") -> None:
        super().__init__(message or error_class)
        self.error_class = error_class
        self.message = message or error_class


class ProviderTransport(Protocol):
    async def send(
        self, request: ProviderRequest, *, timeout: float, allow_private: bool
    ) -> ProviderResponse: ...
