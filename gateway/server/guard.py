"""The API port's guard against slow and piled-up clients, as the proxy port has it.

A new connection must finish its first request head within `server.header_timeout` of its
accept, and a later head within that of its first byte (else it is closed, with a 408 when
part of a head came); one address holds at most `server.max_connections_per_ip`
connections (more are answered 503 with Retry-After and closed before a byte is read); a
request body that stops arriving for `header_timeout` is refused (`read_body`). aiohttp's
request handler is wrapped as the asyncio protocol it is, never reached into; `watch_heads`
(a middleware) tells the guard when a head was read and when its response is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from gateway.errors import InvalidRequestError, RequestTooLargeError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _answer(status: int, reason: str, code: str, message: str, retry_after: int | None) -> bytes:
    body = orjson.dumps({"error": {"code": code, "message": message, "reason": None, "rule": None}})
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n"
    )
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    return head.encode("ascii") + b"\r\n" + body


HEAD_TIMED_OUT = _answer(
    408,
    "Request Timeout",
    "invalid_request",
    "the request head did not finish within server.header_timeout",
    None,
)
TOO_MANY = _answer(
    503,
    "Service Unavailable",
    "unavailable",
    "too many connections from this address (server.max_connections_per_ip)",
    1,
)


class ConnectionGuard:
    """The connections of one API listener, by source address."""

    def __init__(self, *, header_timeout: float, max_per_ip: int) -> None:
        self.header_timeout = header_timeout
        self.max_per_ip = max_per_ip
        self.per_ip: dict[str, int] = {}
        self._by_transport: dict[asyncio.BaseTransport, GuardedConnection] = {}
        self.refused = 0  # connections refused at accept (over the per-address cap)
        self.timed_out = 0  # heads that did not finish in time

    def protocol_factory(
        self, inner: Callable[[], asyncio.Protocol]
    ) -> Callable[[], asyncio.Protocol]:
        """For `loop.create_server`: each connection's aiohttp handler, guarded."""
        return lambda: GuardedConnection(self, inner())

    def admit(self, connection: GuardedConnection) -> bool:
        count = self.per_ip.get(connection.ip, 0)
        if count >= self.max_per_ip:
            self.refused += 1
            return False
        self.per_ip[connection.ip] = count + 1
        assert connection.transport is not None
        self._by_transport[connection.transport] = connection
        return True

    def forget(self, connection: GuardedConnection) -> None:
        if (
            connection.transport is None
            or self._by_transport.pop(connection.transport, None) is None
        ):
            return
        left = self.per_ip.get(connection.ip, 1) - 1
        if left > 0:
            self.per_ip[connection.ip] = left
        else:
            self.per_ip.pop(connection.ip, None)

    def of(self, request: web.Request) -> GuardedConnection | None:
        transport = request.transport
        return self._by_transport.get(transport) if transport is not None else None


class GuardedConnection(asyncio.Protocol):
    """aiohttp's handler for one connection, behind the guard's accept and head timer."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.ip = ""
        self.admitted = False
        self.awaiting_head = True  # no request is being served: bytes are a head's
        self.head_begun = False  # bytes of the awaited head have arrived
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else ""
        if not self.guard.admit(self):
            transport.write(TOO_MANY)
            transport.close()
            return
        self.admitted = True
        self._arm()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if self.awaiting_head:
            self.head_begun = True
            if self._timer is None:
                self._arm()  # the first bytes of a later head: header_timeout to finish
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.forget(self)
        if self.admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()

    # --- the head timer, driven by `watch_heads` ----------------------------------------

    def head_read(self) -> None:
        self.awaiting_head = self.head_begun = False
        self._disarm()

    def response_done(self) -> None:
        # aiohttp's keepalive_timeout bounds the idle wait; the timer starts at a head's
        # first byte (data_received), not now.
        self.awaiting_head = True

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.guard.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if not self.awaiting_head or self.transport is None or self.transport.is_closing():
            return
        self.guard.timed_out += 1
        if self.head_begun:  # a head begun and never finished is answered; silence is not
            self.transport.write(HEAD_TIMED_OUT)
        self.transport.close()


GUARD = web.AppKey("connection_guard", ConnectionGuard)
BODY = web.RequestKey("body", bytes)


@web.middleware
async def watch_heads(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A request reached the app, so its head is read: the head timer stops until the
    response is done. Without a guard (an app served by other means) it does nothing."""
    guard = request.app.get(GUARD)
    connection = guard.of(request) if guard is not None else None
    if connection is None:
        return await handler(request)
    connection.head_read()
    try:
        return await handler(request)
    finally:
        connection.response_done()


async def read_body(request: web.Request, *, limit: int, timeout: float) -> bytes:
    """The request body, read once (later calls get the same bytes): at most `limit` bytes
    (RequestTooLargeError past it), and each wait for more at most `timeout` seconds."""
    cached = request.get(BODY)
    if cached is not None:
        return cached
    declared = request.content_length
    if declared is not None and declared > limit:
        raise RequestTooLargeError(f"the request body is over server.max_body_bytes ({limit})")
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            async with asyncio.timeout(timeout):
                chunk = await request.content.readany()
        except TimeoutError:
            raise InvalidRequestError(
                "the request body stopped arriving (server.header_timeout)"
            ) from None
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(f"the request body is over server.max_body_bytes ({limit})")
        parts.append(chunk)
    body = b"".join(parts)
    request[BODY] = body
    return body
