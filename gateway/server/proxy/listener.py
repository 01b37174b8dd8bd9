"""The forward proxy's listener and its connections: absolute-form `http://` requests and
CONNECT tunnels, decided by the caller's policy and audited, on its own port.

A raw asyncio protocol rather than aiohttp's server: every request the strict reader
(`request`) refuses still gets the gateway's headers and an audit record, an idle keep-alive
connection costs one small object and no task, and tunnel bytes pass from one transport to
the other without any parsing (flow control both ways). Each request is the use case's
machine (`tools.forward_flow`), fed from these callbacks: a request it decides at once (a
refusal) is answered in the read that brought its head, with no task; one that waits for
I/O (the lease, the body, the upstream) gets one task that carries out its commands. The
upstream connections are the use case's too (its pool for HTTP, a checked connection for
CONNECT): this package only parses, carries out and relays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from gateway.errors import (
    AuditWriteError,
    RequestTooLargeError,
    UnauthorizedError,
    UnavailableError,
)
from gateway.limits import Limiter
from gateway.runtime import ClientIdentity, PolicyState, Services
from gateway.server.proxy.auth import authenticate_basic, claimed_user
from gateway.server.proxy.exchange import Exchange
from gateway.server.proxy.ports import ClientSide, TunnelRelay
from gateway.server.proxy.responses import plain_response
from gateway.server.proxy.watch import IdleWatch
from gateway.tools.forward_flow import (
    Answer,
    Command,
    Reached,
    refused_connection_record,
    unread_request_record,
)
from gateway.wire.http1 import unfinished_head_problem
from gateway.wire.request import (
    MAX_HEAD,
    MAX_LINE,
    BadRequestError,
    ChunkedDecoder,
    RequestHead,
    parse_request_head,
)

log = logging.getLogger("gateway.proxy")

HEAD_STATE, BUSY_STATE, BODY_STATE, TUNNEL_STATE, CLOSED_STATE = range(5)


class ClientGoneError(Exception):
    """The client went away (closed, half-closed or reset its connection) before its
    request was answered or while the answer was being sent. `reason` says how, in the
    words of a tunnel's `tunnel_close` record: `client_closed` or `client_error`."""

    def __init__(self, reason: str = "client_closed", message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message or "the client closed its connection before its answer"


class ProxyConnection(asyncio.Protocol):
    """One client connection: reads request heads, hands each to the proxy, then either
    waits for the next (keep-alive, no task while idle) or becomes a tunnel's client side."""

    __slots__ = (
        "proxy",
        "transport",
        "peer",
        "buffer",
        "scanned",
        "state",
        "timer",
        "deadline",
        "reading_paused",
        "client_eof",
        "task",
        "waiter",
        "write_paused",
        "drain_waiter",
        "tunnel",
        "auth",
        "last_destination",
        "watch",
        "lost_reason",
    )

    def __init__(self, proxy: ForwardProxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] | None = None
        self.buffer: bytearray | None = None
        self.scanned = 0
        self.state = HEAD_STATE
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None  # when an idle or unfinished head times out
        self.reading_paused = False
        self.client_eof = False  # the client half-closed while its request was served
        self.task: asyncio.Task[None] | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.write_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None
        self.tunnel: TunnelRelay | None = None
        self.auth: tuple[PolicyState, str | None, ClientIdentity | None] | None = None
        self.last_destination: Reached | None = None
        self.watch: IdleWatch | None = None  # made by the first absolute-form request
        self.lost_reason: str | None = None  # how the connection ended, once it has

    # --- transport events ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if peer else None
        if not self.proxy.admit(self):
            return
        self._arm(self.proxy.header_timeout)

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state == TUNNEL_STATE:
            assert self.tunnel is not None
            self.tunnel.from_client(data)
            return
        if state == HEAD_STATE and not self.buffer:
            if self._read_whole_head(data):
                return
            # The first bytes of a head (after an idle keep-alive wait, say): from here the
            # head has server.header_timeout to finish, not what is left of the idle wait.
            self._arm(self.proxy.header_timeout, shorten_only=True)
            self.buffer = bytearray(data)
        elif self.buffer is None:
            self.buffer = bytearray(data)
        else:
            self.buffer += data
        if state == HEAD_STATE:
            self._read_head()
        elif state == BODY_STATE:
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)
        elif len(self.buffer) > MAX_HEAD:
            # Reading goes on while a request is served (no pause and resume per request);
            # what the client sends ahead (a pipelined request, a body) waits here, bounded.
            self.pause_reading()

    def eof_received(self) -> bool | None:
        if self.state == TUNNEL_STATE and self.tunnel is not None:
            return self.tunnel.client_eof()
        if self.state == BUSY_STATE:
            self.client_eof = True  # the answer still goes out, then the connection closes
            return True
        if self.state == HEAD_STATE and self.buffer:
            # Half a head, then the end of the stream: it never ends, so it is answered now
            # (the client may still read) and audited like any head the reader refuses.
            self.proxy.refuse_unparsed(
                self, "the connection ended before the request head did", bytes(self.buffer[:200])
            )
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        previous, self.state = self.state, CLOSED_STATE
        self.lost_reason = why = "client_error" if exc is not None else "client_closed"
        self.disarm()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.watch is not None:
            self.watch.close()
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(
                ClientGoneError(why, "the client went away before the whole request body arrived")
            )
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_exception(ClientGoneError(why))
        if previous == TUNNEL_STATE and self.tunnel is not None:
            self.tunnel.client_lost(exc)
        elif self.task is not None and not self.task.done():
            self.task.cancel()  # stop the upstream request of a client that left
        self.proxy.forget(self)

    def pause_writing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.client_paused()
        self.write_paused = True

    def resume_writing(self) -> None:
        if self.tunnel is not None:
            self.tunnel.client_resumed()
        self.write_paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    # --- reading ------------------------------------------------------------------------

    def _read_whole_head(self, data: bytes) -> bool:
        """The usual case: one read holds exactly one request head and nothing else."""
        end = len(data) - 4
        if end <= 0 or data.find(b"\r\n\r\n") != end or data.startswith(b"\r\n"):
            return False
        self._start(data[:end])
        return True

    def _read_head(self) -> None:
        buf = self.buffer
        assert buf is not None and self.transport is not None
        while buf.startswith(b"\r\n"):  # RFC 9112 2.2: ignore blank lines before a request
            del buf[:2]
            self.scanned = max(0, self.scanned - 2)
        if not buf:
            self.buffer, self.scanned = None, 0
            return
        end = buf.find(b"\r\n\r\n", max(0, self.scanned - 3))
        if end < 0:
            # Lines end with CRLF only (RFC 9112 2.2 lets a recipient accept a bare LF; this
            # reader, like the one for upstream responses, does not), and a head sure to be
            # refused is refused now: one whose lines end with LF alone never sends CRLF CRLF.
            refusal = unfinished_head_problem(
                buf, self.scanned, max_line=MAX_LINE, max_head=MAX_HEAD
            )
            self.scanned = len(buf)
            if refusal is not None:
                self.proxy.refuse_unparsed(self, refusal, bytes(buf[:200]))
            return
        raw = bytes(buf[:end])
        if end + 4 == len(buf):
            self.buffer = None
        else:
            del buf[: end + 4]
        self.scanned = 0
        self._start(raw)

    def _start(self, raw: bytes) -> None:
        self.disarm()
        self.state = BUSY_STATE
        try:
            head = parse_request_head(raw)
        except BadRequestError as exc:
            self.proxy.refuse_unparsed(self, str(exc), raw[:200])
            return
        proxy = self.proxy
        try:
            exchange, command = proxy.begin(self, head)
            if not isinstance(command, Answer):  # I/O to wait for: a task carries it out
                self.task = proxy.loop.create_task(self._serve(exchange, command))
                return
            # Decided in this callback (a refusal, an error): answered now, with no task.
            keep_alive = exchange.answer(command)
        except (ClientGoneError, ConnectionError):
            keep_alive = False
        except Exception:
            log.exception("proxy request failed")
            keep_alive = False
        # The next head is read in a later callback, as after a task: pipelined refusals
        # never nest, and what arrives meanwhile waits in the bounded buffer.
        proxy.loop.call_soon(self._served, keep_alive)

    async def _serve(self, exchange: Exchange, command: Command) -> None:
        keep_alive = False
        try:
            keep_alive = await self.proxy.carry_out(exchange, command)
        except (ClientGoneError, ConnectionError, asyncio.CancelledError):
            keep_alive = False
        except Exception:
            log.exception("proxy request failed")
            keep_alive = False
        finally:
            self.task = None
        self._served(keep_alive)

    def _served(self, keep_alive: bool) -> None:
        """A request is answered: wait for the next head, or close."""
        if self.state in (TUNNEL_STATE, CLOSED_STATE) or self.transport is None:
            return
        if not keep_alive or self.proxy.draining or self.client_eof:
            self.transport.close()
            return
        self.state = HEAD_STATE
        self._arm(self.proxy.keepalive_timeout)
        if self.reading_paused:
            self.resume_reading()
        if self.buffer:  # a pipelined head began while this request was served
            self._arm(self.proxy.header_timeout, shorten_only=True)
            self._read_head()

    async def read_body(self, head: RequestHead, limit: int) -> bytes:
        """The request body (Content-Length or chunked), at most `limit` bytes."""
        assert self.transport is not None
        if head.content_length is not None and head.content_length > limit:
            raise RequestTooLargeError(f"the request body is over {limit} bytes")
        body = bytearray()
        decoder = ChunkedDecoder() if head.chunked else None
        self.state = BODY_STATE
        if self.reading_paused:
            self.resume_reading()
        try:
            while True:
                buf = self.buffer or bytearray()
                if decoder is not None:
                    body += decoder.feed(buf)
                    if decoder.done:
                        break
                else:
                    need = (head.content_length or 0) - len(body)
                    body += buf[:need]
                    del buf[:need]
                    if len(body) == head.content_length:
                        break
                if len(body) > limit:
                    raise RequestTooLargeError(f"the request body is over {limit} bytes")
                if self.client_eof:  # half-closed before the whole body: it never comes
                    raise ClientGoneError(
                        "client_closed",
                        "the client closed its side before the whole request body arrived",
                    )
                self.waiter = asyncio.get_running_loop().create_future()
                try:
                    async with asyncio.timeout(self.proxy.header_timeout):
                        await self.waiter
                except TimeoutError:
                    raise BadRequestError(
                        "the request body stopped arriving (server.header_timeout)"
                    ) from None
                finally:
                    self.waiter = None
        finally:
            if self.state == BODY_STATE:
                self.state = BUSY_STATE
        if len(body) > limit:
            raise RequestTooLargeError(f"the request body is over {limit} bytes")
        return bytes(body)

    # --- writing ------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ClientGoneError()
        self.transport.write(data)

    async def drain(self) -> None:
        if not self.write_paused:
            return
        if self.transport is None or self.transport.is_closing():
            raise ClientGoneError()
        self.drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await self.drain_waiter
        finally:
            self.drain_waiter = None

    def start_tunnel(self, tunnel: TunnelRelay) -> None:
        assert self.transport is not None
        self.tunnel = tunnel
        self.state = TUNNEL_STATE
        leftover, self.buffer = self.buffer, None
        if self.reading_paused and not self.client_eof:
            # Before the tunnel starts, not after: a splice relay it may start at once pauses
            # the transport and reads the socket itself; resuming then would make two readers.
            self.resume_reading()
        tunnel.start(bytes(leftover) if leftover else b"")
        if self.state == TUNNEL_STATE and self.client_eof and not tunnel.client_eof():
            self.transport.close()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # --- timers -------------------------------------------------------------------------

    # One timer per connection, moved lazily: a request only sets or clears `deadline`, and
    # the timer, when it fires early, re-arms itself for what is left (no timer per request).

    def _arm(self, delay: float, *, shorten_only: bool = False) -> None:
        loop = self.proxy.loop
        deadline = loop.time() + delay
        if shorten_only and self.deadline is not None and self.deadline <= deadline:
            return
        self.deadline = deadline
        timer = self.timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self.timer = loop.call_at(deadline, self._timed_out)

    def disarm(self) -> None:
        """Stop waiting for a request head (the listener refused the connection's bytes)."""
        self.deadline = None

    def _timed_out(self) -> None:
        self.timer = None
        deadline = self.deadline
        if deadline is None or self.state != HEAD_STATE or self.transport is None:
            return
        loop = self.proxy.loop
        if loop.time() < deadline:
            self.timer = loop.call_at(deadline, self._timed_out)
            return
        if self.buffer:  # a head begun and never finished: answered and audited
            self.proxy.refuse_unparsed(
                self,
                "the request head did not finish within server.header_timeout",
                bytes(self.buffer[:200]),
                status=408,
            )
            return
        self.transport.close()  # an idle keep-alive connection

    @property
    def idle(self) -> bool:
        return self.state == HEAD_STATE and not self.buffer


class ForwardProxy:
    """The proxy listener and its connections; one per gateway process."""

    def __init__(self, services: Services, *, limiter: Limiter | None = None) -> None:
        self.services = services
        config = services.config
        self.header_timeout = config.server.header_timeout
        self.keepalive_timeout = config.server.keepalive_timeout
        self.max_per_ip = config.server.max_connections_per_ip
        self.max_body = config.server.max_body_bytes
        self.proxy_config = config.proxy
        # Tunnels relay with splice(2) where the platform has it; a test turns it off to
        # exercise the transport relay, which stays in use elsewhere.
        self.splice = True
        self.limiter: Limiter = limiter or services.limiter
        self.connections: set[ProxyConnection] = set()
        self.tunnels: set[TunnelRelay] = set()
        self.per_ip: dict[str, int] = {}
        self.servers: list[asyncio.Server] = []
        self.draining = False
        self.closing = False  # set once `close` ends what is still in flight
        self.drain_deadline: float | None = None  # monotonic; set by the first drain()
        self._background: set[asyncio.Task[Any]] = set()
        self._idle_close: asyncio.Task[None] | None = None
        self.loop = asyncio.get_running_loop()  # built on the loop that will serve it
        # The use case: decisions, records, and the upstream connections (its own pool).
        self.traffic = services.forward_traffic()

    async def start(self, host: str, port: int) -> list[tuple[str, int]]:
        loop = self.loop
        server = await loop.create_server(
            lambda: ProxyConnection(self),
            host or None,
            port,
            reuse_address=True,
            reuse_port=self.services.config.listen.workers > 1 or None,
            backlog=1024,
        )
        self.servers.append(server)
        binds = []
        for sock in server.sockets:
            name = sock.getsockname()
            binds.append((str(name[0]), int(name[1])))
        log.info("forward proxy listening", extra={"binds": binds})
        return binds

    # --- connection bookkeeping ---------------------------------------------------------

    def admit(self, conn: ProxyConnection) -> bool:
        ip = conn.peer[0] if conn.peer else ""
        count = self.per_ip.get(ip, 0)
        if self.draining or count >= self.max_per_ip:
            if self.draining:
                refusal = UnavailableError("the gateway is shutting down", retry_after=5)
            else:
                # A slot frees as soon as one of this address's connections ends.
                refusal = UnavailableError(
                    "too many connections from this address (server.max_connections_per_ip)",
                    retry_after=1,
                )
            self._refuse_connection(conn, refusal)
            return False
        self.per_ip[ip] = count + 1
        self.connections.add(conn)
        return True

    def _refuse_connection(self, conn: ProxyConnection, refusal: UnavailableError) -> None:
        """Refused at accept, before any byte is read: one record (the source address; no
        client is known yet), a 503 with Retry-After, closed. A flood of connections costs
        one record each and reads nothing."""
        assert conn.transport is not None
        event_id, record = refused_connection_record(conn.peer, refusal)
        try:
            self.audit(record)
        except AuditWriteError as exc:
            refusal = UnavailableError(exc.message, retry_after=refusal.retry_after)
        retry_after = str(int(refusal.retry_after or 1))
        conn.state = CLOSED_STATE
        conn.transport.write(
            plain_response(
                503,
                "unavailable",
                None,
                refusal.message,
                keep_alive=False,
                request_id=event_id,
                extra=(("Retry-After", retry_after),),
            )
        )
        conn.transport.close()

    def forget(self, conn: ProxyConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            ip = conn.peer[0] if conn.peer else ""
            left = self.per_ip.get(ip, 1) - 1
            if left > 0:
                self.per_ip[ip] = left
            else:
                self.per_ip.pop(ip, None)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- audit --------------------------------------------------------------------------

    def audit(self, record: dict[str, Any]) -> None:
        self.services.audit.append(record)

    def refuse_unparsed(
        self, conn: ProxyConnection, message: str, start: bytes, *, status: int = 400
    ) -> None:
        """A request the reader refused: audited, answered 400 bad_request (408 for a head
        that did not finish in time), closed."""
        event_id, record = unread_request_record(conn.peer, message, start, status)
        reason = "bad_request"
        try:
            self.audit(record)
        except AuditWriteError:
            status, reason = 503, "unavailable"
        conn.state = CLOSED_STATE
        conn.disarm()
        if conn.transport is not None:
            conn.transport.write(
                plain_response(status, reason, None, message, keep_alive=False, request_id=event_id)
            )
            conn.transport.close()

    # --- requests -----------------------------------------------------------------------

    def begin(self, conn: ProxyConnection, head: RequestHead) -> tuple[Exchange, Command]:
        """A request's machine, fed who asks: its first command (an Answer when it is
        decided without waiting for anything)."""
        exchange = Exchange(self, conn, head)
        flow = exchange.flow
        header = None
        try:
            header = head.get("proxy-authorization")
            client = self._authenticate(conn, header)
        except BadRequestError as exc:
            return exchange, flow.bad_credentials(str(exc))
        except UnauthorizedError as exc:
            claimed = claimed_user(header, {c.id for c in self.services.state.clients})
            return exchange, flow.unauthorized(exc.message, claimed)
        command = flow.identified(
            client,
            self.services.state.default_policy,
            draining=self.draining or self.services.draining,
        )
        return exchange, command

    async def carry_out(self, exchange: Exchange, command: Command) -> bool:
        """Carry out a request's commands; True when the connection may carry another."""
        conn = exchange.conn
        try:
            return await exchange.run(command)
        except (ClientGoneError, asyncio.CancelledError) as exc:
            # A client that went away cancels its request, as does the end of the shutdown
            # grace: what the policy decided for it still gets its record.
            if isinstance(exc, ClientGoneError) and not self.closing:
                exchange.abandoned(exc.reason, exc.message)
            else:
                exchange.abandoned(*self.gone(conn))
            raise

    def gone(self, conn: ClientSide) -> tuple[str, str]:
        """Why a request of `conn` ended unanswered, and a message saying so."""
        if self.closing or conn.lost_reason is None:  # the gateway ended it, not the client
            return "shutdown", "the gateway shut down before the answer"
        return conn.lost_reason, "the client went away before its answer"

    def _authenticate(self, conn: ProxyConnection, header: str | None) -> ClientIdentity | None:
        state = self.services.state
        cached = conn.auth
        if cached is not None and cached[0] is state and cached[1] == header:
            return cached[2]
        client = authenticate_basic(state, header)
        conn.auth = (state, header, client)
        return client

    # --- reload, drain, close -----------------------------------------------------------

    def revalidate(self, old: PolicyState, new: PolicyState) -> None:
        """After a reload: close tunnels and idle keep-alive connections whose client was
        removed (or changed token) or whose destination the new policy denies, as the use
        case re-decides them. Requests in flight finish under the policy they started with."""
        after_reload = self.traffic.after_reload
        connect_ports = self.proxy_config.connect_ports
        for tunnel in list(self.tunnels):
            why = after_reload(new, tunnel.flow.client, tunnel.flow.reached, connect_ports)
            if why is not None:
                tunnel.close(why)
        for conn in list(self.connections):
            if not conn.idle or conn.auth is None:
                continue
            if after_reload(new, conn.auth[2], conn.last_destination) is not None:
                conn.close()

    async def drain(self) -> None:
        """Stop accepting, close idle keep-alive connections; requests and tunnels in flight
        go on until `close` (after `server.shutdown_grace`)."""
        self.draining = True
        if self.drain_deadline is None:
            # The grace counts from the drain (SIGTERM), not from `close`, which serve calls
            # only after the API has drained: the whole shutdown stays within the grace.
            self.drain_deadline = time.monotonic() + self.services.config.server.shutdown_grace
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            if conn.idle:
                conn.close()

    async def close(self, grace: float | None = None) -> None:
        """Wait up to `grace` for requests and tunnels in flight, then end them all."""
        await self.drain()
        assert self.drain_deadline is not None
        deadline = self.drain_deadline if grace is None else time.monotonic() + grace
        while (self.tunnels or self._busy()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.closing = True
        self.traffic.close()
        for tunnel in list(self.tunnels):
            tunnel.close("shutdown")
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        for server in self.servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def _busy(self) -> bool:
        return any(c.state in (BUSY_STATE, BODY_STATE) for c in self.connections)

    async def status(self) -> dict[str, Any]:
        return {
            "connections": len(self.connections),
            "tunnels": len(self.tunnels),
            "draining": self.draining,
        }


def install_forward_proxy(services: Services) -> None:
    """Register the proxy listener with serve's `extra_sites` when a proxy port is set."""
    if services.config.listen.proxy_port is None:
        return

    async def start(services: Services) -> list[tuple[str, int]]:
        proxy = ForwardProxy(services)
        port = services.config.listen.proxy_port
        assert port is not None
        binds = await proxy.start(services.config.listen.host, port)
        services.on_drain.append(proxy.drain)
        services.on_close.append(proxy.close)
        services.on_reload.append(proxy.revalidate)
        services.status_providers["proxy"] = proxy.status
        return binds

    services.extra_sites.append(start)
