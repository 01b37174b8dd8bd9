"""One request on the proxy port, from its head to its audit record and answer: an
absolute-form `http://` request forwarded through `fetch.upstream`'s pool, or a CONNECT
decided, opened with `fetch.tunnel` and handed to a `Tunnel`. The decisions are the use
case's (`tools.forward`); the connection and the listener are reached through the small
interfaces of `ports`, never the listener itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from gateway.errors import (
    AuditWriteError,
    GatewayError,
    PolicyDeniedError,
    RateLimitedError,
    RequestTooLargeError,
    ResponseTooLargeError,
    UnauthorizedError,
    UnavailableError,
    UpstreamTimeoutError,
)
from gateway.fetch.client import ACCEPT
from gateway.fetch.http1 import has_body
from gateway.fetch.tunnel import open_tunnel
from gateway.fetch.upstream import request_head
from gateway.limits import Lease
from gateway.policy.engine import Decision, Reason
from gateway.policy.model import Policy
from gateway.policy.urls import Target
from gateway.runtime import ClientIdentity
from gateway.server.proxy.auth import REALM, claimed_user
from gateway.server.proxy.ports import ClientSide, ProxyHost
from gateway.server.proxy.request import BadRequestError, RequestHead
from gateway.server.proxy.responses import (
    one_line,
    plain_response,
    response_head,
)
from gateway.server.proxy.tunnel import Tunnel, UpstreamSide
from gateway.server.proxy.watch import IdleWatch
from gateway.tools import forward
from gateway.tools.records import auth_failure_record, new_event_id, proxy_record

log = logging.getLogger("gateway.proxy")


class Exchange:
    """One request on the proxy port, from its head to its audit record and answer."""

    __slots__ = (
        "proxy",
        "conn",
        "head",
        "client",
        "policy",
        "event_id",
        "started",
        "allowed",
        "recorded",
    )

    def __init__(self, proxy: ProxyHost, conn: ClientSide, head: RequestHead) -> None:
        self.proxy = proxy
        self.conn = conn
        self.head = head
        self.client: ClientIdentity | None = None
        self.policy: Policy | None = None
        self.event_id = new_event_id()
        self.started = time.monotonic()
        # What the policy allowed, until a record names it: a request abandoned in between
        # (its client went away) is still recorded with it (`abandoned`).
        self.allowed: tuple[Decision, Target] | None = None
        self.recorded = False

    @property
    def client_id(self) -> str | None:
        return self.client.id if self.client else None

    @property
    def action(self) -> str:
        return "proxy_connect" if self.head.method == "CONNECT" else "proxy_http"

    def record(self, **fields: Any) -> dict[str, Any]:
        record = proxy_record(
            self.action,
            event_id=self.event_id,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            client_id=self.client_id,
            policy=self.policy,
            source=self.conn.peer,
            url=self.head.target,
            method=self.head.method,
            request_id=self.event_id,
            **fields,
        )
        allowed = self.allowed[0] if self.allowed is not None else None
        if "dlp" not in record and allowed is not None and allowed.dlp is not None:
            # What DLP reported stays on the record of a request that then failed.
            record["dlp"] = allowed.dlp.to_record()
        return record

    async def provenance(
        self, policy: Policy, decision: Decision, target: Target, sent: str | None
    ) -> Decision:
        return await forward.check_provenance(
            policy,
            self.proxy.services.sightings,
            self.client_id or "anonymous",
            decision,
            target,
            sent,
        )

    def audit(self, record: dict[str, Any]) -> None:
        """Write this request's record (raises AuditWriteError), noting that it has one."""
        self.recorded = True
        self.proxy.audit(record)

    def abandoned(self, why: str, message: str) -> None:
        """The request ended without an answer (`why`: `client_closed`, `client_error`,
        `shutdown`): if the policy had allowed it and no record says so yet, one does now,
        with the decision and the way it ended. Nothing is answered; the client is gone."""
        if self.allowed is None or self.recorded:
            return
        decision, target = self.allowed
        record = self.record(
            decision=decision,
            error=GatewayError(message, reason=why),
            destination=_destination(target, None),
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
        record = self.record(decision=None, error=error, status=status)
        record["error"]["code"] = reason
        return self.audited_reply(record, status, reason, None, message, keep_alive)

    def gateway_error(self, error: GatewayError, keep_alive: bool = True) -> bool:
        record = self.record(decision=None, error=error, status=error.http_status)
        extra: tuple[tuple[str, str], ...] = ()
        if error.retry_after is not None:
            extra = (("Retry-After", str(max(1, int(error.retry_after + 0.999)))),)
        return self.audited_reply(
            record, error.http_status, error.code, None, error.message, keep_alive, extra
        )

    def deny(self, decision: Decision, target: Target | None = None) -> bool:
        invalid = decision.reason is Reason.INVALID_URL
        record = self.record(
            decision=decision,
            denied=True,
            status=400 if invalid else 403,
            destination=_destination(target, None),
        )
        return self.audited_reply(
            record,
            400 if invalid else 403,
            str(decision.reason),
            decision.rule,
            forward.refusal_message(decision),
            True,
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
        head, policy = self.head, self.policy
        assert policy is not None
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
        decision, target = forward.decide_request(
            policy, head.target, head.method, head.forwarded_headers()
        )
        if target is not None:
            decision = await self.provenance(policy, decision, target, head.target)
        if target is None or not decision.allowed:
            return self.deny(decision, target)
        self.allowed = (decision, target)
        try:
            host = head.get("host")
        except BadRequestError as exc:
            return self.fail(400, "bad_request", str(exc), False)
        if host is not None and not forward.same_authority(host, target, head.target):
            return self.fail(
                400,
                "bad_request",
                f"the Host header ({one_line(host, 100)}) disagrees with the request target",
                False,
            )
        if self.client is None:  # no clients configured: no limits, no lease to hand back
            return await self._forward(policy, decision, target)
        try:
            lease = await self.proxy.acquire(self.client)
        except (RateLimitedError, UnavailableError) as exc:
            return self.gateway_error(exc)
        try:
            return await self._forward(policy, decision, target)
        finally:
            await lease.release()

    async def _forward(self, policy: Policy, decision: Decision, target: Target) -> bool:
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
                judged = forward.decide_body(policy, decision, body)
                if judged is not decision:
                    decision = judged
                    self.allowed = (decision, target)
                    if not decision.allowed:
                        return self.deny(decision, target)
        request = request_head(
            head.method,
            target,
            _upstream_headers(head, proxy.services.fetcher.user_agent),
            None if body is None else len(body),
        )
        if body:
            request += body
        watch = conn.watch
        if watch is None:
            watch = conn.watch = IdleWatch(proxy.loop, proxy.proxy_config.tunnel_idle_timeout)
        watch.start()
        try:
            return await self._relay(policy, decision, target, request, watch)
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
        policy: Policy,
        decision: Decision,
        target: Target,
        request: bytes,
        watch: IdleWatch,
    ) -> bool:
        head, conn, proxy = self.head, self.conn, self.proxy
        try:
            upstream = await proxy.upstream.exchange(policy, target, head.method, request)
        except PolicyDeniedError as exc:
            return self.deny(exc.decision, target)
        except GatewayError as exc:
            return self.gateway_error(exc, keep_alive=True)
        watch.touch()
        try:
            response = upstream.head
            assert response is not None
            conn.last_destination = (policy, target, upstream.ip)
            out, keep_alive, chunked, length = response_head(
                response.status, response.reason.decode("latin-1"), response.headers, head
            )
            body = has_body(head.method, response.status)
            cap = forward.response_byte_cap(policy)
            if body and policy.proxy_limits.content_types is not None:
                # proxy_limits: judged on the head, before a byte of the body is relayed.
                judged = forward.decide_response_head(policy, _content_type(response.headers))
                if not judged.allowed:
                    return self.deny(judged, target)
                if judged.reason is not None:
                    decision = judged  # report mode: recorded as the would-be denial
            if body and cap is not None and length is not None and length > cap:
                return self._too_large(decision, target, upstream.ip, length)
            record = self.record(
                decision=decision,
                status=response.status,
                response_bytes=length,
                destination=_destination(target, upstream.ip),
            )
            try:
                self.audit(record)
            except AuditWriteError as exc:
                return self.reply(503, "unavailable", None, exc.message, False)
            watch.streaming = True
            if not body:
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
            self._cut(decision, target, upstream.ip, upstream.head.status if upstream.head else 0)
            return False
        except (GatewayError, TimeoutError, OSError):
            # The head is out: an upstream failure can only cut the response short.
            if conn.transport is not None:
                conn.transport.abort()
            return False
        finally:
            upstream.release()

    def _too_large(self, decision: Decision, target: Target, ip: str, length: int) -> bool:
        """A Content-Length past proxy_limits.max_response_bytes: refused before the body."""
        assert self.policy is not None
        error = forward.too_large(self.policy, length)
        record = self.record(
            decision=decision,
            error=error,
            status=error.http_status,
            destination=_destination(target, ip),
        )
        return self.audited_reply(
            record, error.http_status, error.code, error.rule, error.message, False
        )

    def _cut(self, decision: Decision, target: Target, ip: str, status: int) -> None:
        assert self.policy is not None
        error = forward.too_large(self.policy)
        record = self.record(
            decision=decision,
            error=error,
            status=status,
            response_bytes=forward.response_byte_cap(self.policy),
            destination=_destination(target, ip),
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
        policy = self.policy
        assert policy is not None
        target = forward.connect_target(self.head.target)
        if target is None:
            return self.fail(
                400, "bad_request", "CONNECT needs host:port (e.g. CONNECT example.com:443)", False
            )
        decision = forward.decide_connect(
            policy, target, self.head.target, self.proxy.proxy_config.connect_ports
        )
        decision = await self.provenance(policy, decision, target, None)
        if not decision.allowed:
            self.deny(decision, target)
            return False
        self.allowed = (decision, target)
        try:
            lease = await self.proxy.acquire(self.client)
        except (RateLimitedError, UnavailableError) as exc:
            self.gateway_error(exc)
            return False
        handed_over = False
        try:
            handed_over = await self._open(policy, target, decision, lease)
        finally:
            if not handed_over:
                await lease.release()
        return False

    async def _open(self, policy: Policy, target: Target, decision: Decision, lease: Lease) -> bool:
        fetcher = self.proxy.services.fetcher
        upstream = UpstreamSide()
        try:
            opened = await open_tunnel(
                policy,
                target,
                lambda: upstream,
                static_hosts=fetcher.static_hosts,
                own_addresses=fetcher.own_addresses,
            )
        except PolicyDeniedError as exc:
            self.deny(exc.decision, target)
            return False
        except GatewayError as exc:
            self.gateway_error(exc, keep_alive=False)
            return False
        if self.conn.transport is None or self.conn.transport.is_closing():
            # Gone while the upstream connection opened: no tunnel, so no 200 on record
            # (it would have no tunnel_close), but the decision is.
            opened.transport.close()
            self.abandoned(*self.proxy.gone(self.conn))
            return False
        record = self.record(
            decision=decision,
            status=200,
            destination=_destination(target, str(opened.ip)),
        )
        try:
            self.audit(record)
        except AuditWriteError as exc:
            opened.transport.close()
            self.reply(503, "unavailable", None, exc.message, False)
            return False
        self.conn.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        tunnel = Tunnel(
            proxy=self.proxy,
            conn=self.conn,
            upstream=upstream,
            upstream_transport=opened.transport,
            event_id=self.event_id,
            client=self.client,
            policy=policy,
            target=target,
            ip=opened.ip,
            lease=lease,
            require_tls=self.proxy.proxy_config.require_tls,
        )
        self.conn.start_tunnel(tunnel)
        return True


def _upstream_headers(head: RequestHead, user_agent: str) -> list[tuple[str, str]]:
    """The end-to-end headers for the upstream, repeated names joined (RFC 9110 5.3), with
    the gateway's User-Agent and Accept where the client sent none."""
    merged: dict[str, tuple[str, str]] = {}  # by lower-case name: (name as first sent, value)
    for name, value in head.forwarded_headers():
        lower = name.lower()
        if lower in merged:
            first, joined = merged[lower]
            merged[lower] = (first, joined + ("; " if lower == "cookie" else ", ") + value)
        else:
            merged[lower] = (name, value)
    headers = list(merged.values())
    if "accept-encoding" not in merged:
        headers.append(("Accept-Encoding", "identity"))  # the gateway must not add a coding
    if "accept" not in merged:
        headers.insert(0, ("Accept", ACCEPT))
    if "user-agent" not in merged:
        headers.insert(0, ("User-Agent", user_agent))
    return headers


def _content_type(headers: Any) -> str | None:
    for name, value in headers:
        if len(name) == 12 and name.lower() == b"content-type":
            return str(value.decode("latin-1"))
    return None


def _destination(target: Target | None, ip: str | None) -> dict[str, Any] | None:
    if target is None:
        return None
    return {"domain": target.host, "ip": ip, "port": target.port}
