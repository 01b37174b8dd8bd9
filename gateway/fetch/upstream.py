"""The forward proxy's upstream client for plain-HTTP requests: keep-alive HTTP/1.1 connections
opened through the tunnel checks (`fetch.tunnel.open_tunnel`), a strict response-head parser,
and a body pipe that writes straight into the client's transport with flow control.

Used only by the proxy's absolute-form path; model tools keep the `Fetcher`. It never decides
policy (that happened before) and never reframes a body beyond re-chunking what it validated.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import UpstreamError, UpstreamUnreachableError
from gateway.fetch.resolver import StaticHosts
from gateway.fetch.tunnel import open_tunnel
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.urls import Target

MAX_HEADERS = 128
MAX_FIELD = 16 * 1024
MAX_HEAD = 64 * 1024
MAX_CHUNK_LINE = 1024
MAX_TRAILER = 16 * 1024
# Bytes read ahead of a body pipe (after the head, before the proxy asks for the body).
MAX_AHEAD = 256 * 1024

_STATUS = re.compile(rb"HTTP/1\.([01]) ([1-9][0-9]{2})(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?\Z")
_FIELD = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):([^\x00-\x08\x0a-\x1f\x7f]*)\Z")
_DIGITS = re.compile(rb"[0-9]{1,18}\Z")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}\Z")
_EXTENSION = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*\Z")

_HEAD, _READY, _BODY, _DONE, _FAILED = range(5)
_LENGTH, _CHUNKED, _UNTIL_CLOSE, _NONE = range(4)
_SIZE, _DATA, _CRLF, _TRAILER = range(4)


class BadResponseError(UpstreamError):
    """The upstream's response cannot be read unambiguously; it is refused, not repaired."""


class Sink(Protocol):
    """Where a body goes: the proxy's client connection."""

    write_paused: bool

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ResponseHead:
    status: int
    reason: bytes
    version: str  # "HTTP/1.1" | "HTTP/1.0"
    headers: tuple[tuple[bytes, bytes], ...]  # as received, values trimmed
    content_length: int | None
    chunked: bool
    keep_alive: bool  # the upstream allows another request on this connection


def parse_response_head(raw: bytes, method: str) -> ResponseHead:
    """A response head without its final blank line; raises BadResponseError."""
    if len(raw) > MAX_HEAD:
        raise BadResponseError(f"the upstream's response head is over {MAX_HEAD} bytes")
    lines = raw.split(b"\r\n")
    breaks = len(lines) - 1
    if raw.count(b"\r") != breaks or raw.count(b"\n") != breaks:
        raise BadResponseError("bare CR or LF in the upstream's response head")
    if breaks > MAX_HEADERS:
        raise BadResponseError(f"the upstream sent more than {MAX_HEADERS} header fields")
    status_line = _STATUS.match(lines[0])
    if status_line is None:
        raise BadResponseError("the upstream's status line is not HTTP/1.x NNN reason")
    version = "HTTP/1.1" if status_line[1] == b"1" else "HTTP/1.0"
    status = int(status_line[2])
    headers = []
    lengths: list[bytes] = []
    codings: list[bytes] = []
    options: list[bytes] = []
    match_field = _FIELD.match
    for line in lines[1:]:
        if len(line) > MAX_FIELD:
            raise BadResponseError(f"an upstream header field is over {MAX_FIELD} bytes")
        matched = match_field(line)
        if matched is None:
            if line[:1] in (b" ", b"\t"):
                raise BadResponseError("obs-fold in the upstream's response head")
            raise BadResponseError("an upstream header line is not NAME: VALUE")
        name, value = matched[1], matched[2].strip(b" \t")
        headers.append((name, value))
        if len(name) in (10, 14, 17):
            lower = name.lower()
            if lower == b"content-length":
                lengths.append(value)
            elif lower == b"transfer-encoding":
                codings.append(value)
            elif lower == b"connection":
                options.append(value)
    if lengths and codings:
        raise BadResponseError("the upstream sent both Content-Length and Transfer-Encoding")
    content_length = None
    if lengths:
        if len(lengths) > 1:
            raise BadResponseError("the upstream repeated Content-Length")
        if not _DIGITS.match(lengths[0]):
            raise BadResponseError("the upstream's Content-Length is not a decimal number")
        content_length = int(lengths[0])
    chunked = False
    if codings:
        if [c.strip().lower() for c in b",".join(codings).split(b",")] != [b"chunked"]:
            raise BadResponseError("the upstream used a transfer coding other than chunked")
        chunked = True
    tokens = {t.strip().lower() for v in options for t in v.split(b",")}
    keep_alive = version == "HTTP/1.1" and b"close" not in tokens
    if not has_body(method, status):
        content_length, chunked = 0, False
    elif content_length is None and not chunked:
        keep_alive = False  # the body ends when the connection does
    return ResponseHead(
        status, status_line[3] or b"", version, tuple(headers), content_length, chunked, keep_alive
    )


def has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status not in (204, 304) and not 100 <= status < 200


def request_head(
    method: str, target: Target, headers: Iterable[tuple[str, str]], body_length: int | None
) -> bytes:
    """The request head for the upstream: origin-form target, Host, the given headers (values
    already checked by the proxy's strict reader), Content-Length when there is a body."""
    host = f"[{target.host}]" if ":" in target.host else target.host
    if target.port != 80:
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
        "chunk_state",
        "line",
        "trailer",
        "sink",
        "pending",
        "touch",
        "paused",
        "reusable",
        "rechunk",
    )

    def __init__(self) -> None:
        self.pool: UpstreamPool | None = None
        self.key: tuple[object, ...] = ()
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
        self.chunk_state = _SIZE
        self.line = bytearray()
        self.trailer = 0
        self.sink: Sink | None = None
        self.pending: bytes | None = None
        self.touch: Callable[[], None] | None = None
        self.paused = False
        self.reusable = False
        self.rechunk = False

    # --- transport events ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.touch is not None:
            self.touch()
        state = self.state
        try:
            if state == _BODY:
                self._body(data)
            elif state == _HEAD:
                self.received = True
                self.buffer += data
                self._read_head()
            elif state == _READY:
                self.buffer += data
                if len(self.buffer) > MAX_AHEAD and self.transport is not None:
                    self.paused = True
                    self.transport.pause_reading()
            else:
                self._fail(BadResponseError("the upstream sent bytes nobody asked for"))
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
        self.buffer.clear()
        self.reusable = False
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.waiter

    def _read_head(self) -> None:
        buf = self.buffer
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise BadResponseError(f"the upstream's response head is over {MAX_HEAD} bytes")
                return
            head = parse_response_head(bytes(buf[:end]), self.method)
            del buf[: end + 4]
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise BadResponseError("the upstream switched protocols unasked")
                continue  # an interim response: the final one follows
            self.head = head
            if head.chunked:
                self.framing, self.chunk_state, self.trailer = _CHUNKED, _SIZE, 0
                self.line.clear()
            elif head.content_length is not None:
                self.framing, self.left = _LENGTH, head.content_length
            else:
                self.framing = _UNTIL_CLOSE
            self.state = _READY
            self._wake()
            return

    async def pipe(
        self, sink: Sink, prefix: bytes, touch: Callable[[], None] | None, rechunk: bool
    ) -> None:
        """The body into `sink`, `prefix` (the client's response head) with its first bytes.
        `rechunk`: the client gets chunked framing (a chunked or close-delimited upstream body
        to an HTTP/1.1 client). Raises what ended it early."""
        self.sink, self.pending, self.touch = sink, prefix, touch
        self.rechunk = rechunk
        self.state = _BODY
        self.waiter = asyncio.get_running_loop().create_future()
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
                self.waiter = asyncio.get_running_loop().create_future()
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
            self._out(b"%x\r\n%b\r\n" % (len(data), data) if self.rechunk else data)

    def _chunks(self, data: bytes) -> None:
        view = memoryview(data)
        pos, size = 0, len(data)
        out: list[bytes | memoryview] = []
        rechunk = self.rechunk
        line = self.line
        while pos < size:
            state = self.chunk_state
            if state == _DATA:
                take = min(self.left, size - pos)
                out.append(view[pos : pos + take])
                pos += take
                self.left -= take
                if self.left == 0:
                    self.chunk_state = _CRLF
                continue
            if state == _CRLF:
                need = 2 - len(line)
                line += view[pos : pos + need]
                pos += min(need, size - pos)
                if len(line) < 2:
                    break
                if line != b"\r\n":
                    raise BadResponseError("an upstream chunk is not followed by CRLF")
                line.clear()
                self.chunk_state = _SIZE
                if rechunk:
                    out.append(b"\r\n")
                continue
            end = data.find(b"\n", pos)
            stop = end + 1 if end >= 0 else size
            line += view[pos:stop]
            pos = stop
            limit = MAX_CHUNK_LINE + 2 if state == _SIZE else MAX_FIELD + 2
            if len(line) > limit:
                raise BadResponseError("an upstream chunk-size or trailer line is too long")
            if end < 0:
                break
            text = bytes(line)
            line.clear()
            if not text.endswith(b"\r\n") or b"\r" in text[:-2]:
                raise BadResponseError("an upstream chunk line does not end with CRLF")
            text = text[:-2]
            if state == _SIZE:
                length, _, extension = text.partition(b";")
                if not _HEX.match(length) or not _EXTENSION.match(extension):
                    raise BadResponseError("an upstream chunk size is not a hexadecimal number")
                self.left = int(length, 16)
                if self.left:
                    self.chunk_state = _DATA
                    if rechunk:
                        out.append(b"%x\r\n" % self.left)
                else:
                    self.chunk_state = _TRAILER
            elif text:
                self.trailer += len(text) + 2
                if self.trailer > MAX_TRAILER or _FIELD.match(text) is None:
                    raise BadResponseError("the upstream's chunked trailer is malformed")
            else:
                if rechunk:
                    out.append(b"0\r\n\r\n")  # trailers are dropped, never forwarded
                if out:
                    self._out(b"".join(out))
                # Bytes after the last chunk: the connection is spoiled, not reused.
                self._finish(pos == size and self.head is not None and self.head.keep_alive)
                return
        if out:
            self._out(b"".join(out))

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
    ) -> None:
        self._static_hosts = static_hosts
        self._own = own_addresses
        self.max_idle_per_key = max_idle_per_key
        self.idle_expiry = idle_expiry
        self._idle: dict[tuple[object, ...], list[UpstreamConnection]] = {}
        self._closed = False

    async def exchange(
        self, policy: Policy, target: Target, method: str, data: bytes
    ) -> UpstreamConnection:
        """Send `data` (a whole request) and return the connection once the final response
        head is read (`.head`, `.ip`); the caller then `pipe`s the body and `release`s it.
        Raises PolicyDeniedError, UpstreamUnreachableError, UpstreamTimeoutError or
        UpstreamError (BadResponseError for a response refused)."""
        key = (policy.name, policy.sha256, policy.source, target.host, target.port)
        for _ in range(3):
            conn = self._checkout(key)
            if conn is None:
                break
            try:
                await self._send(conn, method, data)
            except (UpstreamError, UpstreamUnreachableError):
                if conn.received:
                    raise
                continue  # a kept connection the upstream had closed: try another
            return conn
        opened = await open_tunnel(
            policy,
            target,
            UpstreamConnection,
            static_hosts=self._static_hosts(),
            own_addresses=self._own(),
        )
        fresh = opened.protocol
        assert isinstance(fresh, UpstreamConnection)
        fresh.pool, fresh.key, fresh.ip = self, key, str(opened.ip)
        await self._send(fresh, method, data)
        return fresh

    async def _send(self, conn: UpstreamConnection, method: str, data: bytes) -> None:
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

    def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                if conn.transport is not None:
                    conn.transport.close()
        self._idle.clear()
