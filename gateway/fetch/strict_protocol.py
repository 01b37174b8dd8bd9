"""aiohttp's client protocol behind the gateway's strict HTTP/1 reader (`wire.http1`).

aiohttp's response parser is lenient (a bare LF ends a line, a chunk extension may run to
its line limit) and reads bytes past a response's end as the next response, so a response
it took, and where it ended, could differ from what the proxy's own reader makes of the
same bytes. Every byte an upstream sends goes through `ResponseFraming` first, and aiohttp
gets only whole heads and whole chunk lines it accepted: what it refuses fails the request
with its reason (before aiohttp could trip on it, which would leave a body read waiting);
bytes past a response's end never reach aiohttp, and the connection is closed instead of
pooled. aiohttp then parses only responses that both readers read the same way.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from gateway.wire.http1 import BadResponseError, ResponseFraming


class StrictResponseHandler(ResponseHandler):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._framing = ResponseFraming()
        # The address this connection was dialled to (the SocketGuard checked it), kept
        # when the connection is made: an upstream that closes right after its answer
        # leaves no transport to ask by the time the audit record is built.
        self.dialled_ip: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.dialled_ip = str(peer[0]) if peer else None
        super().connection_made(transport)

    def set_response_params(self, *, skip_payload: bool = False, **params: Any) -> None:
        # Called once per request on this connection, before its response is read.
        self._framing.expect("HEAD" if skip_payload else "GET")
        super().set_response_params(skip_payload=skip_payload, **params)

    @property
    def should_close(self) -> bool:
        return self._framing.spoiled or super().should_close

    def data_received(self, data: bytes) -> None:
        framing = self._framing
        try:
            accepted = framing.feed(data)
        except BadResponseError as exc:
            self._refuse(exc)
            return
        if accepted:
            super().data_received(accepted)
        elif data:
            self._reschedule_timeout()  # bytes arrived (held back): the read timeout restarts
        if framing.spoiled and self.transport is not None:
            # The upstream sent past the end it declared: what it declared was read, the
            # rest is dropped with the connection (never taken as the next response).
            self.transport.close()

    def _refuse(self, exc: BadResponseError) -> None:
        payload = self._payload
        if self.transport is not None:
            self.transport.close()
        self.set_exception(exc)
        if payload is not None and not payload.is_eof():
            payload.set_exception(exc)


def use_strict_responses(connector: aiohttp.BaseConnector) -> aiohttp.BaseConnector:
    """Make every connection `connector` opens read its responses through `http1`."""
    connector._factory = functools.partial(  # type: ignore[assignment]
        StrictResponseHandler, loop=asyncio.get_running_loop()
    )
    return connector
