"""A CONNECT tunnel's relay: bytes from one transport to the other, with flow control both
ways, half-close, an idle timeout and an optional maximum duration.

With `proxy.require_tls` the client's first bytes are held until they form a TLS ClientHello
whose SNI (when present) is the CONNECT host; until then nothing reaches the upstream and
nothing comes back. After that no byte is parsed. Every tunnel ends in exactly one
`tunnel_close` record with the `event.id` of its `proxy_connect` record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from gateway.errors import AuditWriteError
from gateway.server.proxy.ports import ClientSide, ProxyHost
from gateway.server.proxy.splice import SPLICE_AVAILABLE, SplicePump
from gateway.server.proxy.tls_hello import (
    MAX_HELLO_BYTES,
    ClientHello,
    NotTLSError,
    parse_client_hello,
)
from gateway.tools.forward_flow import TunnelFlow

log = logging.getLogger("gateway.proxy")

PENDING_LIMIT = 256 * 1024  # upstream bytes held while the ClientHello is checked


class UpstreamSide(asyncio.Protocol):
    """The upstream connection's protocol; holds early bytes until its tunnel starts."""

    __slots__ = ("transport", "tunnel", "pending", "eof", "lost", "lost_exc")

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.tunnel: Tunnel | None = None
        self.pending: list[bytes] = []
        self.eof = False
        self.lost = False
        self.lost_exc: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.tunnel is not None and self.tunnel.verified:
            self.tunnel.from_upstream(data)
            return
        self.pending.append(data)
        if sum(map(len, self.pending)) > PENDING_LIMIT and self.transport is not None:
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        if self.tunnel is not None and self.tunnel.verified:
            return self.tunnel.upstream_eof()
        self.eof = True
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.tunnel is not None:
            self.tunnel.upstream_lost(exc)
        else:
            self.lost, self.lost_exc = True, exc

    def pause_writing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.conn_pause_reading()

    def resume_writing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.conn_resume_reading()


class Tunnel:
    __slots__ = (
        "proxy",
        "conn",
        "upstream",
        "upstream_transport",
        "flow",
        "verified",
        "hello",
        "started",
        "last_activity",
        "bytes_up",
        "bytes_down",
        "client_eof_seen",
        "upstream_eof_seen",
        "closed",
        "timers",
        "pump",
        "splice_wanted",
    )

    def __init__(
        self,
        *,
        proxy: ProxyHost,
        conn: ClientSide,
        upstream: UpstreamSide,
        upstream_transport: asyncio.Transport,
        flow: TunnelFlow,
        require_tls: bool,
    ) -> None:
        self.proxy = proxy
        self.conn = conn
        self.upstream = upstream
        self.upstream_transport = upstream_transport
        self.flow = flow  # the use case's side: decisions, the record, the lease
        self.verified = not require_tls
        self.hello = bytearray()
        self.started = time.monotonic()
        self.last_activity = self.started
        self.bytes_up = 0
        self.bytes_down = 0
        self.client_eof_seen = False
        self.upstream_eof_seen = False
        self.closed = False
        self.timers: list[asyncio.TimerHandle] = []
        self.pump: SplicePump | None = None
        self.splice_wanted = SPLICE_AVAILABLE and proxy.splice

    def start(self, leftover: bytes) -> None:
        loop = asyncio.get_running_loop()
        config = self.proxy.proxy_config
        self.proxy.tunnels.add(self)
        self.upstream.tunnel = self
        self.timers.append(loop.call_later(config.tunnel_idle_timeout, self._idle_check))
        if config.tunnel_max_duration is not None:
            self.timers.append(
                loop.call_later(config.tunnel_max_duration, self.close, "max_duration")
            )
        if not self.verified:
            self.timers.append(loop.call_later(self.proxy.header_timeout, self._hello_timeout))
        if self.verified:
            # No ClientHello to wait for: whatever the upstream sent (or its end) before the
            # tunnel started goes out now, as `upstream.lost` below does for a lost connection.
            self._flush_early_upstream()
        if leftover:
            self.from_client(leftover)
        if self.upstream.lost and not self.closed:
            self.upstream_lost(self.upstream.lost_exc)
        if self.verified:
            # After the proxy connection has finished its own hand-over to the tunnel.
            loop.call_soon(self._try_splice)

    # --- zero-copy relay --------------------------------------------------------------

    def _try_splice(self) -> None:
        """Hand the relay to a SplicePump once both transports are idle; else stay put and
        try again at the next chunk."""
        if not self.splice_wanted or self.closed or not self.verified:
            return
        conn_transport = self.conn.transport
        if (
            self.client_eof_seen
            or self.upstream_eof_seen
            or conn_transport is None
            or conn_transport.is_closing()
            or self.upstream_transport.is_closing()
        ):
            self.splice_wanted = False  # half-closed already: not worth a hand-over
            return
        upstream_transport = self.upstream_transport
        if conn_transport.get_write_buffer_size() or upstream_transport.get_write_buffer_size():
            return
        try:
            self.pump = SplicePump(self, conn_transport, self.upstream_transport)
        except OSError as exc:
            log.warning("splice relay unavailable, using the transports: %s", exc)
            self.splice_wanted = False
            return
        self.splice_wanted = False
        self.pump.start()

    def pumped(self, up: bool, count: int) -> None:
        if up:
            self.bytes_up += count
        else:
            self.bytes_down += count
        self.last_activity = time.monotonic()

    def pump_eof(self, up: bool) -> None:
        if up:
            self.client_eof_seen = True
        else:
            self.upstream_eof_seen = True
        if self.client_eof_seen and self.upstream_eof_seen:
            self.close("closed")

    def pump_error(self, up: bool, reading: bool, exc: OSError) -> None:
        # Reading up or writing down fails on the client's side; the rest on the upstream's.
        self.close("client_error" if up == reading else "upstream_error")

    # --- client -> upstream -------------------------------------------------------------

    def from_client(self, data: bytes) -> None:
        if self.closed:
            return
        self.bytes_up += len(data)
        self.last_activity = time.monotonic()
        if self.verified:
            self.upstream_transport.write(data)
            if self.splice_wanted:
                self._try_splice()
            return
        self.hello += data
        try:
            hello = parse_client_hello(bytes(self.hello))
        except NotTLSError as exc:
            self._judge_start(not_tls=str(exc))
            return
        if not isinstance(hello, ClientHello):
            if len(self.hello) > MAX_HELLO_BYTES:
                self._judge_start(not_tls="no complete ClientHello")
            return
        if not self._judge_start(server_name=hello.server_name):
            return
        self.verified = True
        self.upstream_transport.write(bytes(self.hello))
        self.hello = bytearray()
        self._flush_early_upstream()
        asyncio.get_running_loop().call_soon(self._try_splice)

    def _flush_early_upstream(self) -> None:
        pending, self.upstream.pending = self.upstream.pending, []
        for data in pending:
            self.from_upstream(data)
        if self.upstream.transport is not None and not self.closed:
            self.upstream.transport.resume_reading()
        if self.upstream.eof and not self.closed:
            self.upstream_eof()

    def client_eof(self) -> bool:
        self.client_eof_seen = True
        if not self.verified:
            self._judge_start(not_tls="the client closed before a complete ClientHello")
            return False
        if self.upstream_eof_seen:
            self.close("closed")
            return False
        if self.upstream_transport.can_write_eof():
            self.upstream_transport.write_eof()
        return True

    def client_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close("client_error" if exc else "client_closed")

    def client_paused(self) -> None:
        """The client's socket is full: stop reading from upstream."""
        if not self.closed:
            self.upstream_transport.pause_reading()

    def client_resumed(self) -> None:
        if not self.closed and self.verified and self.pump is None:
            self.upstream_transport.resume_reading()

    # --- upstream -> client -------------------------------------------------------------

    def from_upstream(self, data: bytes) -> None:
        if self.closed:
            return
        self.bytes_down += len(data)
        self.last_activity = time.monotonic()
        transport = self.conn.transport
        if transport is not None:
            transport.write(data)
        if self.splice_wanted:
            self._try_splice()

    def upstream_eof(self) -> bool:
        self.upstream_eof_seen = True
        if self.client_eof_seen:
            self.close("closed")
            return False
        transport = self.conn.transport
        if transport is not None and transport.can_write_eof():
            transport.write_eof()
        return True

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.close("upstream_error" if exc else "upstream_closed")

    def conn_pause_reading(self) -> None:
        """The upstream's socket is full: stop reading from the client."""
        if not self.closed and self.conn.transport is not None:
            self.conn.transport.pause_reading()

    def conn_resume_reading(self) -> None:
        if not self.closed and self.conn.transport is not None and self.pump is None:
            self.conn.transport.resume_reading()

    # --- ending -------------------------------------------------------------------------

    def _idle_check(self) -> None:
        if self.closed:
            return
        idle = self.proxy.proxy_config.tunnel_idle_timeout
        quiet = time.monotonic() - self.last_activity
        if quiet >= idle:
            self.close("idle_timeout")
        else:
            # the idle timer is always the first one (see start)
            self.timers[0] = asyncio.get_running_loop().call_later(idle - quiet, self._idle_check)

    def _hello_timeout(self) -> None:
        if not self.closed and not self.verified:
            self._judge_start(not_tls="no ClientHello within server.header_timeout")

    def _judge_start(self, *, not_tls: str | None = None, server_name: str | None = None) -> bool:
        """The use case's verdict on the first bytes; a refusal closes the tunnel. True when
        they may pass."""
        end = self.flow.first_bytes(not_tls=not_tls, server_name=server_name)
        if end is None:
            return True
        self.close(end, refused=True)
        return False

    def close(self, end: str, *, refused: bool = False) -> None:
        """End the tunnel once: both sides closed, one `tunnel_close` record, lease back."""
        if self.closed:
            return
        self.closed = True
        for timer in self.timers:
            timer.cancel()
        self.timers.clear()
        self.proxy.tunnels.discard(self)
        if self.pump is not None:
            self.pump.stop()
        abort = refused  # a refused start is cut, not ended politely
        for transport in (self.conn.transport, self.upstream_transport):
            if transport is not None and not transport.is_closing():
                transport.abort() if abort else transport.close()
        duration_ms = int((time.monotonic() - self.started) * 1000)
        record = self.flow.closed(
            end, duration_ms=duration_ms, bytes_up=self.bytes_up, bytes_down=self.bytes_down
        )
        try:
            self.proxy.audit(record)
        except AuditWriteError:
            log.error(
                "could not write a tunnel_close record", extra={"event_id": self.flow.event_id}
            )
        self.proxy.spawn(self.flow.lease.release())

    def status(self) -> dict[str, Any]:
        return {"host": self.flow.verdict.host, "up": self.bytes_up, "down": self.bytes_down}
