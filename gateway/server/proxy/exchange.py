"""One request on the proxy port, carried out: the use case's machine (`tools.forward_flow`)
decides and records; this module does what its commands say (write the record and the
answer, take the lease, read the body, send upstream through the use case and relay the
response, open and hand over a tunnel) and feeds back what happened. The client's connection
and the listener are reached through the small interfaces of `ports`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.errors import (
    AuditWriteError,
    GatewayError,
    RequestTooLargeError,
    ResponseTooLargeError,
)
from gateway.server.proxy.ports import ClientSide, ProxyHost
from gateway.server.proxy.responses import plain_response, response_head
from gateway.server.proxy.tunnel import Tunnel, UpstreamSide
from gateway.server.proxy.watch import IdleWatch
from gateway.tools.forward_flow import (
    Acquire,
    Answer,
    CheckProvenance,
    Close,
    Command,
    ForwardFlow,
    OpenTunnel,
    ReadBody,
    Relay,
    Send,
    StartTunnel,
)
from gateway.wire.request import BadRequestError, RequestHead

log = logging.getLogger("gateway.proxy")


class Exchange:
    """One request on the proxy port: its machine's commands, carried out."""

    __slots__ = ("proxy", "conn", "head", "flow")

    def __init__(self, proxy: ProxyHost, conn: ClientSide, head: RequestHead) -> None:
        self.proxy = proxy
        self.conn = conn
        self.head = head
        self.flow: ForwardFlow = proxy.traffic.flow(
            head,
            conn.peer,
            max_body=proxy.max_body,
            connect_ports=proxy.proxy_config.connect_ports,
        )

    @property
    def event_id(self) -> str:
        return self.flow.event_id

    def audit(self, record: dict[str, Any] | None) -> None:
        """Write a record of this request (raises AuditWriteError)."""
        if record is not None:
            self.proxy.audit(record)

    def abandoned(self, why: str, message: str) -> None:
        """The request ended without an answer: the record the machine says it still needs."""
        try:
            self.audit(self.flow.abandoned(why, message))
        except AuditWriteError:
            log.error(
                "could not write the record of an abandoned proxy request",
                extra={"event_id": self.event_id},
            )

    def answer(self, command: Answer) -> bool:
        """Write the record first; if the log cannot take it, the answer is 503 instead."""
        try:
            self.audit(command.record)
        except AuditWriteError as exc:
            command = self.flow.audit_failed(exc)
        self.conn.write(
            plain_response(
                command.status,
                command.reason,
                command.rule,
                command.message,
                keep_alive=command.keep_alive,
                request_id=self.event_id,
                version=self.head.version,
                extra=command.extra,
            )
        )
        return command.keep_alive

    async def run(self, command: Command) -> bool:
        """Carry out `command` and those that follow; True when the connection may carry
        another request. The lease the machine took goes back whatever happens."""
        flow, proxy = self.flow, self.proxy
        try:
            while True:
                if isinstance(command, Send):
                    return await self._forward(command)
                if isinstance(command, Answer):
                    return self.answer(command)
                if isinstance(command, CheckProvenance):
                    command = flow.provenance_checked(await proxy.traffic.provenance(command))
                elif isinstance(command, Acquire):
                    try:
                        lease = await proxy.limiter.acquire(command.client_id, command.limits)
                    except GatewayError as exc:
                        command = flow.lease_refused(exc)
                    else:
                        command = flow.leased(lease)
                elif isinstance(command, ReadBody):
                    if command.send_continue:
                        self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    try:
                        body = await self.conn.read_body(self.head, command.limit)
                    except (BadRequestError, RequestTooLargeError) as exc:
                        command = flow.body_refused(exc)
                    else:
                        command = flow.body_read(body)
                else:
                    return await self._open(command)
        finally:
            held = flow.end()
            if held is not None:
                await held.release()

    # --- absolute-form http:// ----------------------------------------------------------

    async def _forward(self, send: Send) -> bool:
        conn, proxy = self.conn, self.proxy
        watch = conn.watch
        if watch is None:
            watch = conn.watch = IdleWatch(proxy.loop, proxy.proxy_config.tunnel_idle_timeout)
        watch.start()
        try:
            return await self._relay(send, watch)
        except asyncio.CancelledError:
            if not watch.fired:
                raise
            if watch.task is not None:
                watch.task.uncancel()  # this cancellation was the watch's, and ends here
            watch.fired = False
            ended = self.flow.upstream_idle(watch.streaming)
            if isinstance(ended, Answer):
                return self.answer(ended)
            if conn.transport is not None:
                conn.transport.abort()
            return False
        finally:
            watch.stop()

    async def _relay(self, send: Send, watch: IdleWatch) -> bool:
        head, conn, proxy, flow = self.head, self.conn, self.proxy, self.flow
        try:
            proxy.services.audit.preflight()  # nothing leaves that cannot be on record
            upstream = await proxy.traffic.send(send)
        except GatewayError as exc:
            return self.answer(flow.upstream_failed(exc))
        watch.touch()
        try:
            response = upstream.head
            assert response is not None
            out, keep_alive, chunked, length = response_head(response, head)
            command = flow.upstream_head(response, upstream.ip, length, keep_alive)
            conn.last_destination = flow.reached
            if isinstance(command, Answer):
                return self.answer(command)
            relay: Relay = command
            try:
                self.audit(relay.record)
            except AuditWriteError as exc:
                return self.answer(flow.audit_failed(exc))
            watch.streaming = True
            if not relay.has_body:
                conn.write(out)
                await upstream.pipe(conn, b"", None, False)
                return relay.keep_alive
            max_duration = proxy.proxy_config.tunnel_max_duration
            if max_duration is None:
                await upstream.pipe(conn, out, watch.touch, chunked, relay.cap)
            else:
                async with asyncio.timeout(max_duration):
                    await upstream.pipe(conn, out, watch.touch, chunked, relay.cap)
            return relay.keep_alive
        except ResponseTooLargeError:
            # Past the cap while streaming: the response is cut (its head is out).
            self._close(flow.cut(upstream.head.status if upstream.head else 0))
            return False
        except (GatewayError, TimeoutError, OSError):
            # The head is out: an upstream failure can only cut the response short.
            self._close(Close())
            return False
        finally:
            upstream.release()

    def _close(self, command: Close) -> None:
        if self.conn.transport is not None:
            self.conn.transport.abort()
        try:
            self.audit(command.record)
        except AuditWriteError:
            log.error(
                "could not write the record of a cut proxy response",
                extra={"event_id": self.event_id},
            )

    # --- CONNECT ------------------------------------------------------------------------

    async def _open(self, command: OpenTunnel) -> bool:
        upstream = UpstreamSide()
        try:
            self.proxy.services.audit.preflight()  # nothing leaves that cannot be on record
            transport, ip = await self.proxy.traffic.open(command, lambda: upstream)
        except GatewayError as exc:
            self.answer(self.flow.upstream_failed(exc))
            return False
        here = self.conn.transport
        gone = self.proxy.gone(self.conn) if here is None or here.is_closing() else None
        started = self.flow.opened(ip, gone=gone)
        if isinstance(started, Close):
            transport.close()
            self._close_quietly(started)
            return False
        return self._start_tunnel(started, upstream, transport)

    def _close_quietly(self, command: Close) -> None:
        try:
            self.audit(command.record)
        except AuditWriteError:
            log.error(
                "could not write the record of an abandoned proxy request",
                extra={"event_id": self.event_id},
            )

    def _start_tunnel(
        self, command: StartTunnel, upstream: UpstreamSide, transport: asyncio.Transport
    ) -> bool:
        try:
            self.audit(command.record)
        except AuditWriteError as exc:
            transport.close()
            self.proxy.spawn(command.lease.release())
            self.answer(self.flow.audit_failed(exc))
            return False
        self.conn.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        tunnel = Tunnel(
            proxy=self.proxy,
            conn=self.conn,
            upstream=upstream,
            upstream_transport=transport,
            flow=command.flow,
            require_tls=self.proxy.proxy_config.require_tls,
        )
        self.conn.start_tunnel(tunnel)
        return False
