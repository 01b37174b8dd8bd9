"""The small interfaces one proxy request and one tunnel talk to: the listener as they see it
(`ProxyHost`), the client's connection (`ClientSide`), and a tunnel as the connection sees it
(`TunnelRelay`). `proxy.ForwardProxy` and `proxy.ProxyConnection` implement them; the
exchange and the tunnel import this module, never `listener`, so the proxy's modules import
one another in one direction only (listener -> exchange -> tunnel -> ports).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from gateway.config import ProxyConfig
from gateway.fetch.upstream import Sink, UpstreamPool
from gateway.limits import Lease
from gateway.policy.addresses import IPAddress
from gateway.policy.model import Policy
from gateway.policy.urls import Target
from gateway.runtime import ClientIdentity, Services
from gateway.server.proxy.request import RequestHead
from gateway.server.proxy.watch import IdleWatch


class TunnelRelay(Protocol):
    """A CONNECT tunnel, as its client connection and the listener drive it."""

    client: ClientIdentity | None
    target: Target
    ip: IPAddress

    def start(self, leftover: bytes) -> None: ...

    def from_client(self, data: bytes) -> None: ...

    def client_eof(self) -> bool: ...

    def client_lost(self, exc: Exception | None) -> None: ...

    def client_paused(self) -> None: ...

    def client_resumed(self) -> None: ...

    def close(self, end: str) -> None: ...


class ClientSide(Sink, Protocol):
    """The client's connection, as a request or a tunnel uses it; a response body is piped
    straight into it (`Sink`: write, write_paused, drain)."""

    transport: asyncio.Transport | None
    peer: tuple[str, int] | None
    lost_reason: str | None
    watch: IdleWatch | None
    last_destination: tuple[Policy, Target, str | None] | None

    async def read_body(self, head: RequestHead, limit: int) -> bytes: ...

    def start_tunnel(self, tunnel: TunnelRelay) -> None: ...


class ProxyHost(Protocol):
    """The listener, as a request or a tunnel uses it: the services, its settings, the
    upstream pool, the open tunnels, and four calls."""

    services: Services
    proxy_config: ProxyConfig
    upstream: UpstreamPool
    loop: asyncio.AbstractEventLoop
    max_body: int
    header_timeout: float
    splice: bool
    tunnels: set[TunnelRelay]

    def audit(self, record: dict[str, Any]) -> None:
        """Write one record (raises AuditWriteError)."""

    async def acquire(self, client: ClientIdentity | None) -> Lease:
        """The client's rate and concurrency lease (raises RateLimitedError)."""

    def gone(self, conn: ClientSide) -> tuple[str, str]:
        """Why a request of `conn` ended unanswered, and a message saying so."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` in the background, kept until it ends."""
