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
from gateway.limits import Limiter
from gateway.runtime import Services
from gateway.server.proxy.watch import IdleWatch
from gateway.tools.forward_flow import Reached, TunnelFlow
from gateway.tools.forward_traffic import ForwardTraffic
from gateway.wire.request import RequestHead


class TunnelRelay(Protocol):
    """A CONNECT tunnel, as its client connection and the listener drive it."""

    flow: TunnelFlow  # who it is for, what allowed it, where it goes: re-asked after a reload

    def start(self, leftover: bytes) -> None: ...

    def from_client(self, data: bytes) -> None: ...

    def client_eof(self) -> bool: ...

    def client_lost(self, exc: Exception | None) -> None: ...

    def client_paused(self) -> None: ...

    def client_resumed(self) -> None: ...

    def close(self, end: str) -> None: ...


class ClientSide(Protocol):
    """The client's connection, as a request or a tunnel uses it; a response body is piped
    straight into it (write, write_paused, drain)."""

    transport: asyncio.Transport | None
    peer: tuple[str, int] | None
    lost_reason: str | None
    watch: IdleWatch | None
    # What allowed its last request, and the address it went to: re-asked after a reload.
    last_destination: Reached | None
    write_paused: bool

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    async def read_body(self, head: RequestHead, limit: int) -> bytes: ...

    def start_tunnel(self, tunnel: TunnelRelay) -> None: ...


class ProxyHost(Protocol):
    """The listener, as a request or a tunnel uses it: the services, its settings, the
    forward-traffic use case, the limiter, the open tunnels, and three calls."""

    services: Services
    proxy_config: ProxyConfig
    traffic: ForwardTraffic
    loop: asyncio.AbstractEventLoop
    max_body: int
    header_timeout: float
    splice: bool
    tunnels: set[TunnelRelay]
    limiter: Limiter

    def audit(self, record: dict[str, Any]) -> None:
        """Write one record (raises AuditWriteError)."""

    def gone(self, conn: ClientSide) -> tuple[str, str]:
        """Why a request of `conn` ended unanswered, and a message saying so."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` in the background, kept until it ends."""
