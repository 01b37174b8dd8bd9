"""One request on the proxy port, from its head to its audit record and answer: an
absolute-form `http://` request forwarded through the use case's upstream pool, or a
CONNECT decided, opened by the use case and handed to a `Tunnel`. Every decision, every
connection upstream and every record is the use case's (`tools.forward`); the client's
connection and the listener are reached through the small interfaces of `ports`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gateway.errors import (
    AuditWriteError,
    GatewayError,
    RateLimitedError,
    RequestTooLargeError,
    ResponseTooLargeError,
    UnauthorizedError,
    UnavailableError,
    UpstreamTimeoutError,
)
from gateway.limits import Lease
from gateway.runtime import ClientIdentity
from gateway.server.proxy.auth import REALM, claimed_user
from gateway.server.proxy.ports import ClientSide, ProxyHost
from gateway.server.proxy.responses import (
    one_line,
    plain_response,
    response_head,
)
from gateway.server.proxy.tunnel import Tunnel, UpstreamSide
from gateway.server.proxy.watch import IdleWatch
from gateway.tools.forward import ProxyCall, Refused, Verdict
from gateway.tools.records import auth_failure_record, new_event_id
from gateway.wire.http1 import has_body
from gateway.wire.request import BadRequestError, RequestHead

log = logging.getLogger("gateway.proxy")


class Exchange:
    """One request on the proxy port, from its head to its audit record and answer."""

    __slots__ = ("proxy", "conn", "head", "client", "call", "recorded")

    def __init__(self, proxy: ProxyHost, conn: ClientSide, head: RequestHead) -> None:
        self.proxy = proxy
        self.conn = conn
        self.head = head
        self.client: ClientIdentity | None = None
        self.call = ProxyCall(source=conn.peer, url=head.target, method=head.method)
        self.recorded = False

    @property
    def event_id(self) -> str:
        return self.call.event_id

    def identify(self, client: ClientIdentity | None) -> None:
        """The caller, once authenticated: its policy (the default one for no client)."""
        self.client = client
        self.call.client_id = client.id if client else None
        self.call.policy = client.policy if client else self.proxy.services.state.default_policy

    def audit(self, record: dict[str, Any]) -> None:
        """Write this request's record (raises AuditWriteError), noting that it has one."""
        self.recorded = True
        self.proxy.audit(record)

    def abandoned(self, why: str, message: str) -> None:
        """The request ended without an answer (`why`: `client_closed`, `client_error`,
        `shutdown`): if the policy had allowed it and no record says so yet, one does now,
        with the decision and the way it ended. Nothing is answered; the client is gone."""
        allowed = self.call.allowed
        if allowed is None or self.recorded:
            return
        record = self.call.record(
            allowed, error=GatewayError(message, reason=why), destination=allowed.destination(None)
        )
        record["error"]["code"] = why
        try:
            self.audit(record)
        except AuditWriteError:
            log.error(
                "could not write the record of an abandoned proxy request",
                extra={"event_id": self.event_id},
            )

    def reply(
        self,
        status: int,
        reason: str,
        rule: str | None,
        message: str,
        keep_alive: bool,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> bool:
        keep_alive = keep_alive and self.head.keep_alive and not self.head.has_body
        self.conn.write(
            plain_response(
                status,
                reason,
                rule,
                message,
                keep_alive=keep_alive,
                request_id=self.event_id,
                version=self.head.version,
                extra=extra,
            )
        )
        return keep_alive

    def audited_reply(
        self,
        record: dict[str, Any],
        status: int,
        reason: str,
        rule: str | None,
        message: str,
        keep_alive: bool,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> bool:
        """Write the record first; if the log cannot take it, the answer is 503 instead."""
        try:
            self.audit(record)
        except AuditWriteError as exc:
            return self.reply(503, "unavailable", None, exc.message, False)
        return self.reply(status, reason, rule, message, keep_alive, extra)

    def fail(self, status: int, reason: str, message: str, keep_alive: bool) -> bool:
        error = GatewayError(message, reason=reason)
        record = self.call.record(error=error, status=status)
        record["error"]["code"] = reason
        return self.audited_reply(record, status, reason, None, message, keep_alive)

    def gateway_error(self, error: GatewayError, keep_alive: bool = True) -> bool:
        record = self.call.record(error=error, status=error.http_status)
        extra: tuple[tuple[str, str], ...] = ()
        if error.retry_after is not None:
            extra = (("Retry-After", str(max(1, int(error.retry_after + 0.999)))),)
        return self.audited_reply(
            record, error.http_status, error.code, None, error.message, keep_alive, extra
        )

    def deny(self, verdict: Verdict) -> bool:
        record = self.call.record(
            verdict, denied=True, status=verdict.status, destination=verdict.destination(None)
        )
        return self.audited_reply(
            record, verdict.status, verdict.code, verdict.rule, verdict.message, True
        )

    def unauthorized(self, error: UnauthorizedError, header: str | None) -> bool:
        record = auth_failure_record(
            transport="proxy",
            message=error.message,
            client_hint=claimed_user(header, {c.id for c in self.proxy.services.state.clients}),
            source=self.conn.peer,
            request_id=self.event_id,
        )
        return self.audited_reply(
            record,
            407,
            "unauthorized",
            None,
            error.message,
            True,
            (("Proxy-Authenticate", REALM),),
        )

    # --- absolute-form http:// ----------------------------------------------------------

    async def forward(self) -> bool:
        head = self.head
        if not head.target.lower().startswith("http://"):
            if head.target.startswith("/"):
                message = (
                    "this port is a forward proxy: send absolute-form requests"
                    " (GET http://host/path), e.g. curl -x"
                )
            elif head.target.lower().startswith("https://"):
                # The proxy never speaks TLS to an upstream for a client (that would be
                # interception); https goes through a CONNECT tunnel end to end.
                message = (
                    "https:// goes through a CONNECT tunnel (HTTPS_PROXY, curl -p -x),"
                    " not as an absolute-form request"
                )
            else:
                message = "the request target is not an absolute http:// URL"
            return self.fail(400, "bad_request", message, True)
        headers = head.forwarded_headers()  # the end-to-end headers, judged and then sent
        verdict = await self.proxy.traffic.request(self.call, headers)
        if not verdict.allowed:
            return self.deny(verdict)
        self.call.allowed = verdict
        try:
            host = head.get("host")
        except BadRequestError as exc:
            return self.fail(400, "bad_request", str(exc), False)
        if host is not None and not verdict.same_authority(host, head.target):
            return self.fail(
                400,
                "bad_request",
                f"the Host header ({one_line(host, 100)}) disagrees with the request target",
                False,
            )
        if self.client is None:  # no clients configured: no limits, no lease to hand back
            return await self._forward(verdict, headers)
        try:
            lease = await self.proxy.acquire(self.client)
        except (RateLimitedError, UnavailableError) as exc:
            return self.gateway_error(exc)
        try:
            return await self._forward(verdict, headers)
        finally:
            await lease.release()

    async def _forward(self, verdict: Verdict, headers: list[tuple[str, str]]) -> bool:
        head, conn, proxy = self.head, self.conn, self.proxy
        body = None
        if head.has_body:
            if "100-continue" in (head.get("expect") or "").lower():
                conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                body = await conn.read_body(head, proxy.max_body)
            except BadRequestError as exc:
                return self.fail(400, "bad_request", str(exc), False)
            except RequestTooLargeError as exc:
                return self.fail(413, "request_too_large", exc.message, False)
            if body:
                # Nothing has gone upstream yet: the prefix is judged before a byte leaves.
                judged = proxy.traffic.body(verdict, body)
                if judged is not verdict:
                    verdict = self.call.allowed = judged
                    if not verdict.allowed:
                        return self.deny(verdict)
        watch = conn.watch
        if watch is None:
            watch = conn.watch = IdleWatch(proxy.loop, proxy.proxy_config.tunnel_idle_timeout)
        watch.start()
        try:
            return await self._relay(verdict, headers, body, watch)
        except asyncio.CancelledError:
            if not watch.fired:
                raise
            if watch.task is not None:
                watch.task.uncancel()  # this cancellation was the watch's, and ends here
            watch.fired = False
            if watch.streaming:  # the head is out: the response can only be cut short
                if conn.transport is not None:
                    conn.transport.abort()
                return False
            return self.gateway_error(
                UpstreamTimeoutError("the upstream stopped sending (proxy.tunnel_idle_timeout)"),
                keep_alive=True,
            )
        finally:
            watch.stop()

    async def _relay(
        self,
        verdict: Verdict,
        headers: list[tuple[str, str]],
        body: bytes | None,
        watch: IdleWatch,
    ) -> bool:
        head, conn, proxy = self.head, self.conn, self.proxy
        try:
            upstream = await proxy.traffic.send(verdict, head.method, headers, body)
        except Refused as exc:
            return self.deny(exc.verdict)
        except GatewayError as exc:
            return self.gateway_error(exc, keep_alive=True)
        watch.touch()
        try:
            response = upstream.head
            assert response is not None
            conn.last_destination = (verdict, upstream.ip)
            out, keep_alive, chunked, length = response_head(response, head)
            has = has_body(head.method, response.status)
            cap = verdict.byte_cap
            if has and verdict.judges_content_types:
                # proxy_limits: judged on the head, before a byte of the body is relayed.
                judged = proxy.traffic.response(verdict, response.headers)
                if not judged.allowed:
                    return self.deny(judged)
                verdict = judged  # report mode: recorded as the would-be denial
            if has and cap is not None and length is not None and length > cap:
                return self._too_large(verdict, upstream.ip, length)
            record = self.call.record(
                verdict,
                status=response.status,
                response_bytes=length,
                destination=verdict.destination(upstream.ip),
            )
            try:
                self.audit(record)
            except AuditWriteError as exc:
                return self.reply(503, "unavailable", None, exc.message, False)
            watch.streaming = True
            if not has:
                conn.write(out)
                await upstream.pipe(conn, b"", None, False)
                return keep_alive
            max_duration = proxy.proxy_config.tunnel_max_duration
            if max_duration is None:
                await upstream.pipe(conn, out, watch.touch, chunked, cap)
            else:
                async with asyncio.timeout(max_duration):
                    await upstream.pipe(conn, out, watch.touch, chunked, cap)
            return keep_alive
        except ResponseTooLargeError:
            # Past proxy_limits.max_response_bytes while streaming: the response is cut (its
            # head is out) and a second record, with the request's trace id, says so.
            if conn.transport is not None:
                conn.transport.abort()
            self._cut(verdict, upstream.ip, upstream.head.status if upstream.head else 0)
            return False
        except (GatewayError, TimeoutError, OSError):
            # The head is out: an upstream failure can only cut the response short.
            if conn.transport is not None:
                conn.transport.abort()
            return False
        finally:
            upstream.release()

    def _too_large(self, verdict: Verdict, ip: str, length: int) -> bool:
        """A Content-Length past proxy_limits.max_response_bytes: refused before the body."""
        error = verdict.too_large(length)
        record = self.call.record(
            verdict, error=error, status=error.http_status, destination=verdict.destination(ip)
        )
        return self.audited_reply(
            record, error.http_status, error.code, error.rule, error.message, False
        )

    def _cut(self, verdict: Verdict, ip: str, status: int) -> None:
        error = verdict.too_large()
        record = self.call.record(
            verdict,
            error=error,
            status=status,
            response_bytes=verdict.byte_cap,
            destination=verdict.destination(ip),
        )
        record["event"]["id"] = new_event_id()  # the first record has the request's id
        try:
            self.audit(record)
        except AuditWriteError:
            log.error(
                "could not write the record of a cut proxy response",
                extra={"event_id": self.event_id},
            )

    # --- CONNECT ------------------------------------------------------------------------

    async def connect(self) -> bool:
        verdict = await self.proxy.traffic.connect(self.call, self.proxy.proxy_config.connect_ports)
        if verdict is None:
            return self.fail(
                400, "bad_request", "CONNECT needs host:port (e.g. CONNECT example.com:443)", False
            )
        if not verdict.allowed:
            self.deny(verdict)
            return False
        self.call.allowed = verdict
        try:
            lease = await self.proxy.acquire(self.client)
        except (RateLimitedError, UnavailableError) as exc:
            self.gateway_error(exc)
            return False
        handed_over = False
        try:
            handed_over = await self._open(verdict, lease)
        finally:
            if not handed_over:
                await lease.release()
        return False

    async def _open(self, verdict: Verdict, lease: Lease) -> bool:
        upstream = UpstreamSide()
        try:
            transport, ip = await self.proxy.traffic.open(verdict, lambda: upstream)
        except Refused as exc:
            self.deny(exc.verdict)
            return False
        except GatewayError as exc:
            self.gateway_error(exc, keep_alive=False)
            return False
        if self.conn.transport is None or self.conn.transport.is_closing():
            # Gone while the upstream connection opened: no tunnel, so no 200 on record
            # (it would have no tunnel_close), but the decision is.
            transport.close()
            self.abandoned(*self.proxy.gone(self.conn))
            return False
        record = self.call.record(verdict, status=200, destination=verdict.destination(ip))
        try:
            self.audit(record)
        except AuditWriteError as exc:
            transport.close()
            self.reply(503, "unavailable", None, exc.message, False)
            return False
        self.conn.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        tunnel = Tunnel(
            proxy=self.proxy,
            conn=self.conn,
            upstream=upstream,
            upstream_transport=transport,
            call=self.call,
            client=self.client,
            verdict=verdict,
            ip=ip,
            lease=lease,
            require_tls=self.proxy.proxy_config.require_tls,
        )
        self.conn.start_tunnel(tunnel)
        return True
