"""The one upstream client: keep-alive HTTP/1.1 connections opened through the tunnel checks
(`fetch.tunnel.open_tunnel`: checked addresses only, dialled by `fetch.dial`, TLS verified
against the name asked for), responses read once, by the strict reader and limits of
`wire.http1`, and a body pipe that writes straight into a sink with flow control: the proxy
client's transport, or the `Fetcher`'s bounded decoder (WebFetch, Research, providers).

It never decides policy (that happened before) and never reframes a body beyond re-chunking
what it validated.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Collection, Iterable
from typing import Protocol

from gateway.errors import ResponseTooLargeError, UpstreamError, UpstreamUnreachableError
from gateway.fetch.resolver import StaticHosts
from gateway.fetch.tunnel import open_tunnel
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.urls import Target
from gateway.wire.http1 import ChunkedBody, HeadReader, ResponseHead

# Bytes read ahead of a body pipe (after the head, before the proxy asks for the body).
MAX_AHEAD = 256 * 1024

_HEAD, _READY, _BODY, _DONE, _FAILED = range(5)
_LENGTH, _CHUNKED, _UNTIL_CLOSE, _NONE = range(4)


class Sink(Protocol):
    """Where a body goes: the proxy's client connection."""

    write_paused: bool

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


def request_head(
    method: str, target: Target, headers: Iterable[tuple[str, str]], body_length: int | None
) -> bytes:
    """The request head for the upstream: origin-form target, Host, the given headers (values
    already checked by the proxy's strict reader), Content-Length when there is a body."""
    host = f"[{target.host}]" if ":" in target.host else target.host
    if target.port != (443 if target.scheme == "https" else 80):
        host = f"{host}:{target.port}"
    path = target.url.raw_path_qs or "/"
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class UpstreamConnection(asyncio.Protocol):
    """One upstream connection, one exchange at a time: read the head, then pipe the body."""

    __slots__ = (
        "pool",
        "key",
        "loop",
        "transport",
        "ip",
        "buffer",
        "state",
        "method",
        "head",
        "waiter",
        "error",
        "received",
        "idle_since",
        "framing",
        "left",
        "heads",
        "chunks",
        "sink",
        "pending",
        "touch",
        "paused",
        "reusable",
        "rechunk",
        "limit",
        "relayed",
    )

    def __init__(self) -> None:
        self.pool: UpstreamPool | None = None
        self.key: tuple[object, ...] = ()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.transport: asyncio.Transport | None = None
        self.ip = ""
        self.buffer = bytearray()
        self.state = _DONE
        self.method = "GET"
        self.head: ResponseHead | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.error: Exception | None = None
        self.received = False  # any byte of the current response
        self.idle_since = 0.0
        self.framing = _NONE
        self.left = 0
        self.heads: HeadReader | None = None  # while the head is read
        self.chunks: ChunkedBody | None = None  # for a chunked body
        self.sink: Sink | None = None
        self.pending: bytes | None = None
        self.touch: Callable[[], None] | None = None
        self.paused = False
        self.reusable = False
        self.rechunk = False
        self.limit: int | None = None  # the most body bytes a pipe relays
        self.relayed = 0  # body bytes of a close-delimited body relayed so far

    # --- transport events ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Kept: asking for the running loop costs a getpid(2) per call (fork safety).
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        if self.touch is not None:
            self.touch()
        state = self.state
        try:
            if state == _BODY:
                self._body(data)
            elif state == _HEAD:
                self.received = True
                self._read_head(data)
            elif state == _READY:
                self.buffer += data
                if len(self.buffer) > MAX_AHEAD and self.transport is not None:
                    self.paused = True
                    self.transport.pause_reading()
            elif self.error is None:
                # Past the end of what the upstream declared (an exchange that ended, or an
                # idle connection): not read as anything, and the connection is never reused.
                self._spoil()
        except Exception as exc:  # a hostile response or a client gone: end this exchange
            self._fail(exc)

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.pool is not None:
            self.pool.forget(self)
        if self.state == _BODY and self.framing == _UNTIL_CLOSE:
            self._flush_pending()
            self._finish(False)
        elif self.state in (_HEAD, _READY, _BODY):
            if self.state == _READY and self.framing == _UNTIL_CLOSE:
                return  # the rest of the body is in the buffer; `pipe` delivers it
            self._fail(
                UpstreamUnreachableError("the upstream closed the connection before answering")
                if self.state == _HEAD
                else UpstreamError("the upstream closed the connection mid-body")
            )

    # --- one exchange -------------------------------------------------------------------

    def begin(self, method: str, data: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.method = method
        self.state = _HEAD
        self.head = None
        self.error = None
        self.received = False
        self.buffer = bytearray()
        self.heads = HeadReader(method)
        self.reusable = False
        assert self.loop is not None
        self.waiter = self.loop.create_future()
        self.transport.write(data)
        if self.touch is not None:
            self.touch()  # sent: a read deadline runs from here
        return self.waiter

    def _read_head(self, data: bytes) -> None:
        assert self.heads is not None
        head = self.heads.feed(data)
        if head is None:
            return
        self.head = head
        self.buffer = bytearray(data[self.heads.used :])  # what followed the head
        self.heads = None
        if head.chunked:
            self.framing, self.chunks = _CHUNKED, None
        elif head.content_length is not None:
            self.framing, self.left = _LENGTH, head.content_length
        else:
            self.framing = _UNTIL_CLOSE
        self.state = _READY
        self._wake()

    async def pipe(
        self,
        sink: Sink,
        prefix: bytes,
        touch: Callable[[], None] | None,
        rechunk: bool,
        limit: int | None = None,
    ) -> None:
        """The body into `sink`, `prefix` (the client's response head) with its first bytes.
        `rechunk`: the client gets chunked framing (a chunked or close-delimited upstream body
        to an HTTP/1.1 client). `limit`: past this many body bytes the pipe stops, relaying
        no more than that, and raises ResponseTooLargeError (a Content-Length body is the
        caller's to check against it on the head). Raises what ended it early."""
        self.sink, self.pending, self.touch = sink, prefix, touch
        self.rechunk, self.limit, self.relayed = rechunk, limit, 0
        if limit is not None and self.framing == _LENGTH and self.left > limit:
            self.pending = None  # nothing of it reaches the client
            self._over_limit()
            raise ResponseTooLargeError(f"the response is {self.left} bytes", rule=None)
        if self.framing == _CHUNKED and self.head is not None:
            self.chunks = ChunkedBody(rechunk=rechunk, fields=len(self.head.headers))
        self.state = _BODY
        loop = self.loop or asyncio.get_running_loop()
        self.waiter = loop.create_future()
        ahead = bytes(self.buffer)
        self.buffer.clear()
        if self.framing == _LENGTH and self.left == 0:
            self._finish(self.head is not None and self.head.keep_alive and not ahead)
        elif ahead:
            self._body(ahead)
        if self.state == _BODY and self.transport is None and self.framing == _UNTIL_CLOSE:
            self._finish(False)
        elif self.state == _BODY and self.transport is None:
            self._fail(UpstreamError("the upstream closed the connection before the whole body"))
        if self.paused and self.state == _BODY and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        try:
            while True:
                await self.waiter
                if self.state != _BODY:
                    break
                self.waiter = loop.create_future()
                if self.paused:  # the client is slow: wait for it, then read again
                    await sink.drain()
                    self.paused = False
                    if self.transport is not None:
                        self.transport.resume_reading()
        finally:
            self.sink = self.touch = None
        self._flush_pending()
        if self.error is not None:
            raise self.error

    def _body(self, data: bytes) -> None:
        framing = self.framing
        if framing == _LENGTH:
            left = self.left
            if len(data) > left:
                self.reusable = False
                self._out(data[:left])
                self.left = 0
                self._finish(False)  # more than Content-Length: the connection is spoiled
                return
            self.left = left - len(data)
            self._out(data)
            if self.left == 0:
                self._finish(self.head is not None and self.head.keep_alive)
        elif framing == _CHUNKED:
            self._chunks(data)
        else:
            limit = self.limit
            if limit is not None:
                self.relayed += len(data)
                if self.relayed > limit:
                    data = data[: len(data) - (self.relayed - limit)]
                    if data:
                        self._out(b"%x\r\n%b\r\n" % (len(data), data) if self.rechunk else data)
                    self._over_limit()
                    return
            self._out(b"%x\r\n%b\r\n" % (len(data), data) if self.rechunk else data)

    def _over_limit(self) -> None:
        self._flush_pending()
        self._fail(ResponseTooLargeError(f"the response passed {self.limit} bytes", rule=None))

    def _chunks(self, data: bytes) -> None:
        chunks = self.chunks
        assert chunks is not None
        out: list[bytes | memoryview] = []
        used = chunks.feed(data, out)
        if self.limit is not None and chunks.data > self.limit:
            self._over_limit()  # the chunks that crossed the cap are not relayed
            return
        if out:
            self._out(b"".join(out))
        if chunks.done:
            # Bytes after the last chunk: the connection is spoiled, not reused.
            self._finish(used == len(data) and self.head is not None and self.head.keep_alive)

    def _out(self, data: bytes) -> None:
        sink = self.sink
        assert sink is not None
        if self.pending is not None:
            data, self.pending = self.pending + data, None
        if not data:
            return
        sink.write(data)
        if sink.write_paused and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
            self._wake()

    def _flush_pending(self) -> None:
        if self.pending is not None and self.sink is not None:
            pending, self.pending = self.pending, None
            self.sink.write(pending)

    def _finish(self, reusable: bool) -> None:
        if self.framing == _UNTIL_CLOSE and self.rechunk and self.sink is not None:
            self._out(b"0\r\n\r\n")
        self._flush_pending()
        self.state = _DONE
        self.reusable = reusable
        self._wake()

    def _spoil(self) -> None:
        self.reusable = False
        if self.pool is not None:
            self.pool.forget(self)
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: Exception) -> None:
        if self.state in (_DONE, _FAILED) and self.error is not None:
            return
        self.state = _FAILED
        self.error = exc
        self.reusable = False
        if self.pool is not None:
            self.pool.forget(self)  # an idle connection that spoke out of turn
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def release(self) -> None:
        """Back to the pool when the exchange ended cleanly and both sides allow it."""
        self.touch = None
        pool = self.pool
        if self.state == _DONE and self.reusable and self.transport is not None and pool:
            pool.keep(self)
        elif self.transport is not None:
            self.state = _FAILED
            self.transport.abort()


class UpstreamPool:
    """Idle keep-alive connections by (policy pool key, host, port), capped, expiring."""

    def __init__(
        self,
        *,
        static_hosts: Callable[[], StaticHosts],
        own_addresses: Callable[[], Collection[tuple[IPNetwork, int]]],
        max_idle_per_key: int = 256,
        idle_expiry: float = 15.0,
        tls: ssl.SSLContext | None = None,
        lookup_apart: bool = False,
    ) -> None:
        self._static_hosts = static_hosts
        self._own = own_addresses
        self._tls = tls  # for https targets (the proxy sends none: it never speaks TLS for one)
        self._lookup_apart = lookup_apart  # see fetch.tunnel.open_tunnel
        self.max_idle_per_key = max_idle_per_key
        self.idle_expiry = idle_expiry
        self._idle: dict[tuple[object, ...], list[UpstreamConnection]] = {}
        self._closed = False

    async def exchange(
        self,
        policy: Policy,
        target: Target,
        method: str,
        data: bytes,
        *,
        connect_timeout: float | None = None,
        touch: Callable[[], None] | None = None,
    ) -> UpstreamConnection:
        """Send `data` (a whole request) and return the connection once the final response
        head is read (`.head`, `.ip`: the address dialled); the caller then `pipe`s the body
        and `release`s it. `touch` is called when the request is sent and at every read.
        Raises PolicyDeniedError, UpstreamUnreachableError, UpstreamTimeoutError or
        UpstreamError (BadResponseError for a response refused)."""
        key = (policy.name, policy.sha256, policy.source, target.scheme, target.host, target.port)
        for _ in range(3):
            conn = self._checkout(key)
            if conn is None:
                break
            try:
                await self._send(conn, method, data, touch)
            except (UpstreamError, UpstreamUnreachableError):
                if conn.received:
                    raise
                continue  # a kept connection the upstream had closed: try another
            return conn
        if target.scheme == "https" and self._tls is None:
            raise UpstreamUnreachableError("this upstream client speaks no TLS")
        opened = await open_tunnel(
            policy,
            target,
            UpstreamConnection,
            static_hosts=self._static_hosts(),
            own_addresses=self._own(),
            connect_timeout=connect_timeout,
            tls=self._tls if target.scheme == "https" else None,
            lookup_apart=self._lookup_apart,
        )
        fresh = opened.protocol
        assert isinstance(fresh, UpstreamConnection)
        fresh.pool, fresh.key, fresh.ip = self, key, str(opened.ip)
        await self._send(fresh, method, data, touch)
        return fresh

    async def _send(
        self,
        conn: UpstreamConnection,
        method: str,
        data: bytes,
        touch: Callable[[], None] | None = None,
    ) -> None:
        conn.touch = touch
        try:
            await conn.begin(method, data)
        except BaseException:
            conn.release()
            raise
        if conn.error is not None:
            conn.release()
            raise conn.error

    def _checkout(self, key: tuple[object, ...]) -> UpstreamConnection | None:
        idle = self._idle.get(key)
        deadline = time.monotonic() - self.idle_expiry
        while idle:
            conn = idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                if conn.idle_since >= deadline:
                    return conn
                conn.transport.close()
        return None

    def keep(self, conn: UpstreamConnection) -> None:
        idle = self._idle.setdefault(conn.key, [])
        assert conn.transport is not None
        if self._closed or len(idle) >= self.max_idle_per_key:
            conn.transport.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)
        if len(idle) == 1:
            self._prune()

    def forget(self, conn: UpstreamConnection) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def _prune(self) -> None:
        """Close connections idle past their expiry (run as keys fill, not on a timer)."""
        deadline = time.monotonic() - self.idle_expiry
        for key, idle in list(self._idle.items()):
            while idle and idle[0].idle_since < deadline:
                stale = idle.pop(0)
                if stale.transport is not None:
                    stale.transport.close()
            if not idle:
                del self._idle[key]

    def idle_count(self) -> int:
        return sum(map(len, self._idle.values()))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                if conn.transport is not None:
                    conn.transport.close()
        self._idle.clear()
