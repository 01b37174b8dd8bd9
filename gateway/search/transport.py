"""The one door providers have to the network: request/response values and the transport Protocol.

Providers only build `ProviderRequest`s and parse `ProviderResponse`s; they never open sockets.
The gateway's pinned outbound client implements `ProviderTransport` (no redirects, 5 MiB cap).
`retry_after_seconds` is the one reading of a provider's Retry-After (search and XSearch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Protocol

# The longest wait a provider's Retry-After is believed for: a search provider cools for at
# most this long (health.MAX_COOLING) and an agent refused by XSearch is told at most this.
# A longer hint is a spent quota (re-probed after this anyway) or a hostile value.
MAX_RETRY_AFTER = 600.0


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


def retry_after_seconds(response: ProviderResponse) -> float | None:
    """Retry-After in seconds, at most MAX_RETRY_AFTER; None when absent or unreadable.

    Delta-seconds are read only from ASCII digits (str.isdigit admits '²', which int()
    refuses, and int() refuses over 4300 digits); an HTTP-date is measured from the
    response's own Date header, never this machine's clock.
    """
    raw = (response.headers.get("Retry-After") or "").strip()
    if not raw:
        return None
    if raw.isascii() and raw.isdigit():
        return min(float(int(raw[:9])), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(raw)
        sent = parsedate_to_datetime(response.headers.get("Date", ""))
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None or sent.tzinfo is None:
        return None
    return min(max((when - sent).total_seconds(), 0.0), MAX_RETRY_AFTER)
