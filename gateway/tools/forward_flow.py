"""One request on the forward-proxy port as a sans-IO machine: events in, commands out.

The adapter (`server/proxy/`) parses a request head, hands it here with who asks, and then
carries out what each event returns: answer with this refusal and this record, check where
this client met the host, take a lease, read the body, send upstream, relay the response
with this cap, open a tunnel, close. It feeds back what happened (the body, the upstream's
head, a failure, the client going away). The machine owns the order of the decisions
(authenticate -> decide the request -> Host check -> lease -> body -> send -> judge the
response -> cap -> record), the lease, and every audit record of the request, built through
`tools/records.py`; after a reload, `after_reload` re-decides what a live connection may
keep. It never touches a socket, a task or a timer, so its tests are scripts of events.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.errors import (
    AuditWriteError,
    GatewayError,
    PolicyDeniedError,
    RequestTooLargeError,
    UnavailableError,
    UpstreamTimeoutError,
)
from gateway.limits import FREE_LEASE, Lease
from gateway.policy.model import IPNetwork, Policy
from gateway.tools.forward import (
    ProxyCall,
    Verdict,
    connect_target,
    decide_body,
    decide_connect,
    decide_request,
    decide_response_head,
    still_allowed,
    watches_provenance,
)
from gateway.tools.records import auth_failure_record, new_event_id, proxy_record
from gateway.wire.http1 import ResponseHead, has_body
from gateway.wire.request import BadRequestError, RequestHead

if TYPE_CHECKING:  # annotations only: tools never load the configuration
    from gateway.limits import ClientLimits

AUTH_REALM = 'Basic realm="gateway"'


class Client(Protocol):
    """A configured client, as the machine uses it (runtime's ClientIdentity)."""

    @property
    def id(self) -> str: ...

    @property
    def policy(self) -> Policy: ...

    @property
    def limits(self) -> ClientLimits: ...


class Clients(Protocol):
    """The policy state after a reload, as `after_reload` asks it (runtime's PolicyState)."""

    @property
    def default_policy(self) -> Policy: ...

    @property
    def auth_required(self) -> bool: ...

    def current(self, client: Any) -> Any | None: ...


# What allowed a request or tunnel, and the address it went to: re-decided after a reload.
Reached = tuple[Verdict, str | None]


# --- commands: what the adapter carries out -----------------------------------------------


class Answer:
    """Write `record` (when there is one; a failed write: `audit_failed`), then answer with
    this plain-text refusal or error and keep the connection when `keep_alive`."""

    __slots__ = ("status", "reason", "rule", "message", "keep_alive", "extra", "record")

    def __init__(
        self,
        status: int,
        reason: str,
        rule: str | None,
        message: str,
        keep_alive: bool,
        record: dict[str, Any] | None,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.status = status
        self.reason = reason
        self.rule = rule
        self.message = message
        self.keep_alive = keep_alive
        self.record = record
        self.extra = extra


class CheckProvenance:
    """Ask where this client met the host (dlp.untrusted_hosts), then `provenance_checked`."""

    __slots__ = ("verdict", "client_id", "sent")

    def __init__(self, verdict: Verdict, client_id: str, sent: str | None) -> None:
        self.verdict = verdict
        self.client_id = client_id
        self.sent = sent


class Acquire:
    """Take the client's rate and concurrency lease, then `leased` (or `lease_refused`)."""

    __slots__ = ("client_id", "limits")

    def __init__(self, client_id: str, limits: ClientLimits) -> None:
        self.client_id = client_id
        self.limits = limits


class ReadBody:
    """Read the request body, at most `limit` bytes (first `100 Continue` when asked), then
    `body_read` (or `body_refused`)."""

    __slots__ = ("limit", "send_continue")

    def __init__(self, limit: int, send_continue: bool) -> None:
        self.limit = limit
        self.send_continue = send_continue


class Send:
    """Open (or reuse) an upstream connection for `verdict`, send the request, read the
    response head; then `upstream_head` (or `upstream_failed`)."""

    __slots__ = ("verdict", "method", "headers", "body")

    def __init__(
        self, verdict: Verdict, method: str, headers: list[tuple[str, str]], body: bytes | None
    ) -> None:
        self.verdict = verdict
        self.method = method
        self.headers = headers
        self.body = body


class Relay:
    """Write `record`, then relay the response: its head, and its body when `has_body`, at
    most `cap` body bytes (past it: `cut`); afterwards the connection is kept when
    `keep_alive`."""

    __slots__ = ("record", "cap", "has_body", "keep_alive")

    def __init__(
        self, record: dict[str, Any], cap: int | None, has_body: bool, keep_alive: bool
    ) -> None:
        self.record = record
        self.cap = cap
        self.has_body = has_body
        self.keep_alive = keep_alive


class OpenTunnel:
    """Open the tunnel's upstream connection for `verdict`, then `opened` (or
    `upstream_failed`)."""

    __slots__ = ("verdict",)

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict


class StartTunnel:
    """Write `record`, answer 200, and relay the tunnel `flow` decides (its first bytes, its
    `tunnel_close` record, the lease it hands back when it closes)."""

    __slots__ = ("record", "flow")

    def __init__(self, record: dict[str, Any], flow: TunnelFlow) -> None:
        self.record = record
        self.flow = flow

    @property
    def verdict(self) -> Verdict:
        return self.flow.verdict

    @property
    def ip(self) -> str:
        return self.flow.ip

    @property
    def lease(self) -> Lease:
        return self.flow.lease


class Close:
    """Cut the client's connection (write `record` first, when there is one)."""

    __slots__ = ("record",)

    def __init__(self, record: dict[str, Any] | None = None) -> None:
        self.record = record


# What an event of the request's first part returns; later events return the narrower
# types their signatures name.
Command = Answer | CheckProvenance | Acquire | ReadBody | Send | OpenTunnel


# --- the machine ----------------------------------------------------------------------------


class ForwardFlow:
    """One request on the proxy port, from its parsed head to its last record."""

    __slots__ = (
        "head",
        "call",
        "client",
        "max_body",
        "connect_ports",
        "verdict",
        "headers",
        "lease",
        "recorded",
        "reached",
        "own_addresses",
    )

    def __init__(
        self,
        head: RequestHead,
        source: tuple[str, int] | None,
        *,
        max_body: int,
        connect_ports: Collection[int],
        own_addresses: Collection[tuple[IPNetwork, int]] = (),
    ) -> None:
        self.head = head
        self.own_addresses = own_addresses  # the gateway's own listeners: for refusal hints
        self.call = ProxyCall(source=source, url=head.target, method=head.method)
        self.client: Client | None = None
        self.max_body = max_body
        self.connect_ports = connect_ports
        self.verdict: Verdict | None = None  # what the policy allowed, once it has
        self.headers: list[tuple[str, str]] = []  # the end-to-end headers, judged and sent
        self.lease: Lease | None = None  # held until `end`, or handed to a tunnel
        self.recorded = False
        # What allowed the request and the address it went to: re-decided after a reload.
        self.reached: Reached | None = None

    @property
    def event_id(self) -> str:
        return self.call.event_id

    # --- events: who asks ---------------------------------------------------------------

    def bad_credentials(self, message: str) -> Answer:
        """The credential header could not be read (repeated, say)."""
        return self._fail(400, "bad_request", message, keep_alive=False)

    def unauthorized(self, message: str, claimed: str | None) -> Answer:
        """No client matched the credential; `claimed`: a configured id it named."""
        record = auth_failure_record(
            transport="proxy",
            message=message,
            client_hint=claimed,
            source=self.call.source,
            request_id=self.event_id,
        )
        return self._answer(
            407, "unauthorized", None, message, True, record, (("Proxy-Authenticate", AUTH_REALM),)
        )

    def identified(
        self, client: Client | None, default_policy: Policy, *, draining: bool
    ) -> Command:
        """The caller, once authenticated (None: no clients configured, the default policy)."""
        self.client = client
        self.call.client_id = client.id if client else None
        policy = self.call.policy = client.policy if client else default_policy
        if draining:
            return self._gateway_error(_shutting_down(), keep_alive=False)
        head = self.head
        if head.method == "CONNECT":
            target = connect_target(head.target)
            if target is None:
                return self._fail(
                    400,
                    "bad_request",
                    "CONNECT needs host:port (e.g. CONNECT example.com:443)",
                    keep_alive=False,
                )
            decision = decide_connect(policy, target, head.target, self.connect_ports)
            return self._decided(Verdict(policy, decision, target, self.own_addresses), None)
        problem = _not_absolute_http(head.target)
        if problem is not None:
            return self._fail(400, "bad_request", problem, keep_alive=True)
        self.headers = head.forwarded_headers()
        decision, target = decide_request(policy, head.target, head.method, self.headers)
        return self._decided(Verdict(policy, decision, target, self.own_addresses), head.target)

    def provenance_checked(self, verdict: Verdict) -> Command:
        """What dlp.untrusted_hosts made of the decision."""
        return self._judged(verdict)

    def _decided(self, verdict: Verdict, sent: str | None) -> Command:
        if verdict.target is not None and watches_provenance(verdict.policy):
            return CheckProvenance(verdict, self.call.client_id or "anonymous", sent)
        return self._judged(verdict)

    def _judged(self, verdict: Verdict) -> Command:
        if not verdict.allowed:
            return self._deny(verdict, keep_alive=self.head.method != "CONNECT")
        self.verdict = self.call.allowed = verdict
        if self.head.method != "CONNECT":
            try:
                host = self.head.get("host")
            except BadRequestError as exc:
                return self._fail(400, "bad_request", str(exc), keep_alive=False)
            if host is not None and not verdict.same_authority(host, self.head.target):
                return self._fail(
                    400,
                    "bad_request",
                    f"the Host header ({_one_line(host, 100)}) disagrees with the request target",
                    keep_alive=False,
                )
        if self.client is None:  # no clients configured: no limits, no lease to hand back
            return self.leased(FREE_LEASE)
        return Acquire(self.client.id, self.client.limits)

    # --- events: the lease and the body ---------------------------------------------------

    def leased(self, lease: Lease) -> Command:
        self.lease = lease
        verdict = self.verdict
        assert verdict is not None
        if self.head.method == "CONNECT":
            return OpenTunnel(verdict)
        head = self.head
        if head.has_body:
            if head.content_length is not None and head.content_length > self.max_body:
                return self.body_refused(
                    RequestTooLargeError(f"the request body is over {self.max_body} bytes")
                )
            expect = head.fields.get("expect") or ("",)
            return ReadBody(self.max_body, "100-continue" in expect[0].lower())
        return Send(verdict, head.method, self.headers, None)

    def lease_refused(self, error: GatewayError) -> Answer:
        """Rate or concurrency limit reached, or the shared store is down."""
        return self._gateway_error(error, keep_alive=self.head.method != "CONNECT")

    def body_read(self, body: bytes) -> Command:
        verdict = self.verdict
        assert verdict is not None
        if body:
            # Nothing has gone upstream yet: the prefix is judged before a byte leaves.
            judged = decide_body(verdict.policy, verdict.decision, body)
            if judged is not verdict.decision:
                verdict = self.verdict = self.call.allowed = verdict.refused(judged)
                if not verdict.allowed:
                    return self._deny(verdict, keep_alive=True)
        return Send(verdict, self.head.method, self.headers, body)

    def body_refused(self, error: BadRequestError | RequestTooLargeError) -> Answer:
        if isinstance(error, RequestTooLargeError):
            return self._fail(413, "request_too_large", error.message, keep_alive=False)
        return self._fail(400, "bad_request", str(error), keep_alive=False)

    # --- events: upstream -------------------------------------------------------------------

    def upstream_failed(self, error: GatewayError) -> Answer:
        """The upstream could not be reached or answered badly before its head was out; an
        address the dial checked and refused is a policy denial."""
        if isinstance(error, PolicyDeniedError) and self.verdict is not None:
            denied = self.verdict.refused(error.decision)
            return self._deny(denied, keep_alive=self.head.method != "CONNECT")
        return self._gateway_error(error, keep_alive=self.head.method != "CONNECT")

    def upstream_head(
        self, response: ResponseHead, ip: str, length: int | None, keep_alive: bool
    ) -> Answer | Relay:
        """The upstream's response head (`length`: its Content-Length, None when it has
        none; `keep_alive`: whether the client's connection may carry another request)."""
        verdict = self.verdict
        assert verdict is not None
        self.reached = (verdict, ip)
        body = has_body(self.head.method, response.status)
        cap = verdict.byte_cap
        if body and verdict.judges_content_types:
            # proxy_limits: judged on the head, before a byte of the body is relayed.
            decision = decide_response_head(verdict.policy, _content_type(response.headers))
            if not decision.allowed or decision.reason is not None:
                judged = verdict.refused(decision)
                if not judged.allowed:
                    return self._deny(judged, keep_alive=True)
                verdict = judged  # report mode: recorded as the would-be denial
        if body and cap is not None and length is not None and length > cap:
            error = verdict.too_large(length)
            record = self.call.record(
                verdict, error=error, status=error.http_status, destination=verdict.destination(ip)
            )
            return self._answer(
                error.http_status, error.code, error.rule, error.message, False, record
            )
        self.verdict = verdict
        record = self.call.record(
            verdict,
            status=response.status,
            response_bytes=length,
            destination=verdict.destination(ip),
        )
        self.recorded = True
        return Relay(record, cap, body, keep_alive)

    def upstream_idle(self, streaming: bool) -> Answer | Close:
        """Nothing came from the upstream for proxy.tunnel_idle_timeout."""
        if streaming:  # the head is out: the response can only be cut short
            return Close()
        error = UpstreamTimeoutError("the upstream stopped sending (proxy.tunnel_idle_timeout)")
        return self._gateway_error(error, keep_alive=True)

    def cut(self, status: int) -> Close:
        """Past proxy_limits.max_response_bytes while streaming: the response is cut (its
        head is out) and a second record, with the request's trace id, says so."""
        verdict, ip = self.reached or (self.verdict, None)
        assert verdict is not None
        error = verdict.too_large()
        record = self.call.record(
            verdict,
            error=error,
            status=status,
            response_bytes=verdict.byte_cap,
            destination=verdict.destination(ip),
        )
        record["event"]["id"] = new_event_id()  # the first record has the request's id
        return Close(record)

    def opened(self, ip: str, *, gone: tuple[str, str] | None = None) -> StartTunnel | Close:
        """The tunnel's upstream connection is open, to `ip`; `gone`: the client's connection
        is not (why, and a message saying so)."""
        verdict, lease = self.verdict, self.lease
        assert verdict is not None and lease is not None
        if gone is not None:
            # Gone while the upstream connection opened: no tunnel, so no 200 on record (it
            # would have no tunnel_close), but the decision is.
            return Close(self.abandoned(*gone))
        self.recorded = True
        self.lease = None  # the tunnel's now: it hands the lease back when it closes
        record = self.call.record(verdict, status=200, destination=verdict.destination(ip))
        return StartTunnel(record, TunnelFlow(self.call, self.client, verdict, ip, lease))

    # --- events: the end --------------------------------------------------------------------

    def audit_failed(self, error: AuditWriteError) -> Answer:
        """The log could not take the record of the last command: 503, no record."""
        return Answer(503, "unavailable", None, error.message, False, None)

    def abandoned(self, why: str, message: str) -> dict[str, Any] | None:
        """The request ended without an answer (`why`: `client_closed`, `client_error`,
        `shutdown`): if the policy had allowed it and no record says so yet, the record that
        does, with the decision and the way it ended."""
        allowed = self.call.allowed
        if allowed is None or self.recorded:
            return None
        self.recorded = True
        record = self.call.record(
            allowed, error=GatewayError(message, reason=why), destination=allowed.destination(None)
        )
        record["error"]["code"] = why
        return record

    def end(self) -> Lease | None:
        """The request is over: the lease to hand back (None: none, or the tunnel's)."""
        lease, self.lease = self.lease, None
        return lease

    # --- answers ----------------------------------------------------------------------------

    def _answer(
        self,
        status: int,
        reason: str,
        rule: str | None,
        message: str,
        keep_alive: bool,
        record: dict[str, Any],
        extra: tuple[tuple[str, str], ...] = (),
    ) -> Answer:
        self.recorded = True
        head = self.head
        keep_alive = keep_alive and head.keep_alive and not head.has_body
        return Answer(status, reason, rule, message, keep_alive, record, extra)

    def _fail(self, status: int, reason: str, message: str, *, keep_alive: bool) -> Answer:
        record = self.call.record(error=GatewayError(message, reason=reason), status=status)
        record["error"]["code"] = reason
        return self._answer(status, reason, None, message, keep_alive, record)

    def _gateway_error(self, error: GatewayError, *, keep_alive: bool) -> Answer:
        record = self.call.record(error=error, status=error.http_status)
        extra: tuple[tuple[str, str], ...] = ()
        if error.retry_after is not None:
            extra = (("Retry-After", str(max(1, int(error.retry_after + 0.999)))),)
        return self._answer(
            error.http_status, error.code, None, error.message, keep_alive, record, extra
        )

    def _deny(self, verdict: Verdict, *, keep_alive: bool) -> Answer:
        record = self.call.record(
            verdict, denied=True, status=verdict.status, destination=verdict.destination(None)
        )
        return self._answer(
            verdict.status, verdict.code, verdict.rule, verdict.message, keep_alive, record
        )


class TunnelFlow:
    """An open CONNECT tunnel as the use case sees it: who it is for, what allowed it and
    where it goes (re-decided after a reload), its first bytes judged (`proxy.require_tls`),
    its one `tunnel_close` record, and the lease it hands back. The relay feeds it."""

    __slots__ = ("call", "client", "verdict", "ip", "lease", "refusal")

    def __init__(
        self, call: ProxyCall, client: Client | None, verdict: Verdict, ip: str, lease: Lease
    ) -> None:
        self.call = call
        self.client = client
        self.verdict = verdict
        self.ip = ip
        self.lease = lease
        self.refusal: Verdict | None = None  # the first bytes' refusal, once there is one

    @property
    def event_id(self) -> str:
        return self.call.event_id

    @property
    def reached(self) -> Reached:
        return (self.verdict, self.ip)

    def first_bytes(
        self, *, not_tls: str | None = None, server_name: str | None = None
    ) -> str | None:
        """The tunnel's first bytes: None when they may pass, else how the tunnel ends (the
        refusal's code, `not_tls` or `sni_mismatch`); `not_tls` says what they are instead
        of a ClientHello, `server_name` is the one it sent."""
        judged = self.verdict.tunnel_start(not_tls=not_tls, server_name=server_name)
        if judged.allowed:
            return None
        self.refusal = judged
        return judged.code

    def closed(
        self, end: str, *, duration_ms: int, bytes_up: int, bytes_down: int
    ) -> dict[str, Any]:
        """The tunnel's `tunnel_close` record (with the first bytes' refusal, if any)."""
        return self.call.tunnel_close(
            self.verdict,
            end=end,
            duration_ms=duration_ms,
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            ip=self.ip,
            tls=self.refusal,
        )


# --- records made before any request is known -------------------------------------------------


def unread_request_record(
    source: tuple[str, int] | None, message: str, start: bytes, status: int
) -> tuple[str, dict[str, Any]]:
    """A request the reader refused (`start`: its first bytes): its event id and record."""
    line = start.split(b"\r\n", 1)[0].decode("latin-1")
    method = line.split(" ", 1)[0][:32] if line else None
    event_id = new_event_id()
    error = GatewayError(message, reason="bad_request")
    record = _record_before_identity(source, event_id, error, status, method=method)
    record["error"]["code"] = "bad_request"
    return event_id, record


def refused_connection_record(
    source: tuple[str, int] | None, error: GatewayError
) -> tuple[str, dict[str, Any]]:
    """A connection refused at accept (draining, too many from its address), before any byte
    is read: its event id and record (the source address; no client is known yet)."""
    event_id = new_event_id()
    return event_id, _record_before_identity(source, event_id, error, 503)


def _record_before_identity(
    source: tuple[str, int] | None,
    event_id: str,
    error: GatewayError,
    status: int,
    **fields: Any,
) -> dict[str, Any]:
    return proxy_record(
        "proxy_http",
        event_id=event_id,
        duration_ms=0,
        client_id=None,
        policy=None,
        decision=None,
        error=error,
        source=source,
        status=status,
        request_id=event_id,
        **fields,
    )


# --- after a reload -------------------------------------------------------------------------


def after_reload(
    state: Clients,
    client: Client | None,
    reached: Reached | None,
    *,
    own_addresses: Collection[tuple[IPNetwork, int]],
    connect_ports: Collection[int] | None = None,
) -> str | None:
    """None when a live tunnel (`connect_ports` given) or idle keep-alive connection may stay
    open under the reloaded `state`, else why it must close: its client is gone (removed, or
    its token changed: the runtime's one lookup says), or what it reached (the verdict that
    allowed it and the address it went to) is refused under the client's new policy."""
    if client is None:
        if state.auth_required:
            return "client_removed"
        policy = state.default_policy
    else:
        current = state.current(client)
        if current is None:
            return "client_removed"
        policy = current.policy
    if reached is None:
        return None
    verdict, ip = reached
    assert verdict.target is not None
    allowed = still_allowed(
        policy, verdict.target, ip, own_addresses=own_addresses, connect_ports=connect_ports
    )
    return None if allowed else "policy_reload"


# --- helpers ----------------------------------------------------------------------------------


def _not_absolute_http(target: str) -> str | None:
    """Why a request target is not one this proxy forwards (None: an http:// URL)."""
    lower = target[:8].lower()
    if lower.startswith("http://"):
        return None
    if target.startswith("/"):
        return (
            "this port is a forward proxy: send absolute-form requests"
            " (GET http://host/path), e.g. curl -x"
        )
    if lower.startswith("https://"):
        # The proxy never speaks TLS to an upstream for a client (that would be
        # interception); https goes through a CONNECT tunnel end to end.
        return (
            "https:// goes through a CONNECT tunnel (HTTPS_PROXY, curl -p -x),"
            " not as an absolute-form request"
        )
    return "the request target is not an absolute http:// URL"


def _shutting_down() -> GatewayError:
    return UnavailableError("the gateway is shutting down", retry_after=5)


def _one_line(text: str, limit: int) -> str:
    return "".join(c if c.isprintable() else " " for c in text)[:limit]


def _content_type(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if len(name) == 12 and name.lower() == b"content-type":
            return value.decode("latin-1")
    return None
