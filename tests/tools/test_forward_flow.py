"""The forward-proxy request machine as scripts of events, with no socket: each event the
adapter would feed it (a parsed head and who asks, the lease, the body, the upstream's head,
a failure, the client going away, a reload) and the command expected back, with its record.
One script per refusal path, report mode, a reload mid-request and a lease lost; the same
flows over real sockets are tests/server/proxy/."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config import ClientLimits
from gateway.errors import (
    AuditWriteError,
    PolicyDeniedError,
    RateLimitedError,
    RequestTooLargeError,
    UpstreamUnreachableError,
)
from gateway.limits import FREE_LEASE
from gateway.policy.engine import Decision, Reason
from gateway.policy.hints import refusal_text
from gateway.policy.model import Policy
from gateway.runtime import ClientIdentity, PolicyState
from gateway.tools.forward_flow import (
    Acquire,
    Answer,
    CheckProvenance,
    Close,
    ForwardFlow,
    OpenTunnel,
    ReadBody,
    Relay,
    Send,
    StartTunnel,
    after_reload,
    refused_connection_record,
    unread_request_record,
)
from gateway.wire.http1 import parse_response_head
from gateway.wire.request import BadRequestError, parse_request_head
from tests.tools.test_forward import AWS_KEY, policy

SOURCE = ("127.0.0.1", 40000)
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5"


class CountedLease:
    """A lease that counts how often it is handed back."""

    def __init__(self) -> None:
        self.released = 0

    async def release(self) -> None:
        self.released += 1


def client(name: str = "agent", token: bytes = b"t", rules: Policy | None = None) -> ClientIdentity:
    return ClientIdentity(name, hashlib.sha256(token).digest(), rules or policy(), ClientLimits())


def flow(head: bytes, *, max_body: int = 1024, connect_ports=(443,)) -> ForwardFlow:
    return ForwardFlow(
        parse_request_head(head), SOURCE, max_body=max_body, connect_ports=connect_ports
    )


def start(head: bytes, rules: Policy | None = None, who: ClientIdentity | None = None, **kw):
    machine = flow(head, **kw)
    return machine, machine.identified(who, rules or policy(), draining=False)


def answer_of(command) -> Answer:
    assert isinstance(command, Answer), command
    assert command.record is not None
    return command


def response(raw: bytes = OK_HEAD, method: str = "GET"):
    return parse_response_head(raw, method)


# --- a plain request, allowed --------------------------------------------------------------


async def test_an_allowed_get_is_sent_relayed_and_recorded_once() -> None:
    machine, command = start(b"GET http://a.example.com/x HTTP/1.1\r\nHost: a.example.com")
    assert isinstance(command, Send)
    assert (command.method, command.body) == ("GET", None)
    relay = machine.upstream_head(response(), "93.184.216.34", 5, True)
    assert isinstance(relay, Relay) and (relay.cap, relay.has_body, relay.keep_alive) == (
        None,
        True,
        True,
    )
    record = relay.record
    assert record["event"]["action"] == "proxy_http" and record["event"]["outcome"] == "success"
    assert record["destination"] == {"domain": "a.example.com", "ip": "93.184.216.34", "port": 80}
    assert record["http"]["response"] == {"status_code": 200, "bytes": 5}
    assert record["event"]["id"] == machine.event_id == record["trace"]["id"]
    # Recorded: a client leaving now adds nothing; no clients configured, no real lease.
    assert machine.abandoned("client_closed", "gone") is None
    assert machine.end() is FREE_LEASE and machine.end() is None
    assert machine.reached is not None and machine.reached[1] == "93.184.216.34"


async def test_the_end_to_end_headers_go_upstream_and_a_head_has_no_body() -> None:
    machine, command = start(
        b"GET http://a.example.com/ HTTP/1.1\r\nProxy-Authorization: x\r\nX-A: 1\r\n"
        b"Connection: close"
    )
    assert isinstance(command, Send) and command.headers == [("X-A", "1")]
    relay = machine.upstream_head(response(b"HTTP/1.1 304 Not Modified"), "10.0.0.1", None, False)
    assert isinstance(relay, Relay) and not relay.has_body


# --- every refusal path ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "status", "reason", "rule", "keep_alive"),
    [
        (b"GET http://b.other.org/ HTTP/1.1", 403, "domain_not_allowed", "default", True),
        (b"DELETE http://a.example.com/ HTTP/1.1", 403, "method_not_allowed", "methods", True),
        (b"GET http://[bad/ HTTP/1.1", 400, "invalid_url", None, True),
        (b"GET /x HTTP/1.1", 400, "bad_request", None, True),
        (b"GET https://a.example.com/ HTTP/1.1", 400, "bad_request", None, True),
        (b"GET ftp://a.example.com/ HTTP/1.1", 400, "bad_request", None, True),
        (
            b"GET http://a.example.com/ HTTP/1.1\r\nHost: b.example.com",
            400,
            "bad_request",
            None,
            False,
        ),
        (
            b"GET http://a.example.com/ HTTP/1.1\r\nHost: a.example.com\r\nHost: a.example.com",
            400,
            "bad_request",
            None,
            False,
        ),
        (
            b"GET http://a.example.com/ HTTP/1.1\r\nX-Key: " + AWS_KEY.encode(),
            403,
            "sensitive_data",
            None,
            True,
        ),
        (b"CONNECT a.example.com HTTP/1.1", 400, "bad_request", None, False),
        (b"CONNECT b.other.org:443 HTTP/1.1", 403, "domain_not_allowed", "default", False),
        (b"CONNECT a.example.com:22 HTTP/1.1", 403, "port_not_allowed", None, False),
    ],
    ids=[
        "domain",
        "method",
        "invalid-url",
        "origin-form",
        "https-absolute",
        "other-scheme",
        "host-disagrees",
        "host-repeated",
        "dlp-header",
        "connect-no-port",
        "connect-domain",
        "connect-port",
    ],
)
def test_a_refusal_is_answered_with_its_record(head, status, reason, rule, keep_alive) -> None:
    guarded = policy("dlp: {mode: enforce}\n")
    machine, command = start(head, guarded)
    refusal = answer_of(command)
    assert (refusal.status, refusal.reason, refusal.keep_alive) == (status, reason, keep_alive)
    if rule is not None:
        assert refusal.rule == rule
    record = refusal.record
    assert record is not None and record["event"]["outcome"] == "failure"
    assert record["http"]["response"]["status_code"] == status
    assert record["event"]["id"] == machine.event_id
    assert machine.end() is None  # refused before any lease


def test_who_asks_is_refused_before_anything_is_decided() -> None:
    machine = flow(b"GET http://a.example.com/ HTTP/1.1")
    unknown = machine.unauthorized("unknown token", "agent")
    assert (unknown.status, unknown.reason) == (407, "unauthorized")
    assert ("Proxy-Authenticate", 'Basic realm="gateway"') in unknown.extra
    assert unknown.record is not None and unknown.record["event"]["action"] == "auth_failure"
    assert unknown.record["client"]["claimed"] == "agent"
    unreadable = flow(b"GET http://a.example.com/ HTTP/1.1").bad_credentials("repeated")
    assert (unreadable.status, unreadable.keep_alive) == (400, False)
    shutting = flow(b"GET http://a.example.com/ HTTP/1.1").identified(None, policy(), draining=True)
    refusal = answer_of(shutting)
    assert (refusal.status, refusal.keep_alive) == (503, False)
    assert ("Retry-After", "5") in refusal.extra


def test_a_body_is_read_after_the_lease_and_judged_before_it_leaves() -> None:
    guarded = policy("dlp: {mode: enforce, body_prefix_bytes: 64}\n")
    who = client(rules=guarded)
    head = b"POST http://a.example.com/ HTTP/1.1\r\nContent-Length: 30\r\nExpect: 100-continue"
    machine, command = start(head, who=who)
    assert isinstance(command, Acquire) and command.client_id == "agent"
    lease = CountedLease()
    read = machine.leased(lease)
    assert isinstance(read, ReadBody) and read.send_continue and read.limit == 1024
    refusal = answer_of(machine.body_read(f"k={AWS_KEY}".encode()))
    assert (refusal.status, refusal.reason, refusal.keep_alive) == (403, "sensitive_data", False)
    assert machine.end() is lease and machine.end() is None
    # A clean body goes upstream with the request.
    machine, _ = start(head, who=who)
    machine.leased(CountedLease())
    send = machine.body_read(b"plain")
    assert isinstance(send, Send) and send.body == b"plain"


def test_a_body_too_large_or_unreadable_is_refused() -> None:
    too_large, _ = start(b"POST http://a.example.com/ HTTP/1.1\r\nContent-Length: 4096")
    # No clients: the lease step passes at once, and the announced length is past the limit.
    refusal = answer_of(_)
    assert (refusal.status, refusal.reason, refusal.keep_alive) == (413, "request_too_large", False)
    chunked, read = start(b"POST http://a.example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked")
    assert isinstance(read, ReadBody) and not read.send_continue
    bad = chunked.body_refused(BadRequestError("a chunk size is not a hexadecimal number"))
    assert (bad.status, bad.reason) == (400, "bad_request")
    big = chunked.body_refused(RequestTooLargeError("the request body is over 1024 bytes"))
    assert (big.status, big.reason) == (413, "request_too_large")


def test_a_rate_limit_is_answered_with_retry_after() -> None:
    machine, command = start(b"GET http://a.example.com/ HTTP/1.1", who=client())
    assert isinstance(command, Acquire)
    refusal = machine.lease_refused(RateLimitedError("slow down", retry_after=1.2))
    assert (refusal.status, refusal.reason, refusal.keep_alive) == (429, "rate_limited", True)
    assert ("Retry-After", "2") in refusal.extra
    assert machine.end() is None


def test_the_upstream_refused_unreachable_or_silent() -> None:
    machine, command = start(b"GET http://a.example.com/ HTTP/1.1")
    assert isinstance(command, Send)
    private = Decision(False, Reason.PRIVATE_ADDRESS, "networks.deny", "p", "0")
    denied = machine.upstream_failed(PolicyDeniedError(private, refusal_text(private)))
    assert (denied.status, denied.reason, denied.rule) == (
        403,
        "private_address",
        "networks.deny",
    )
    assert denied.record is not None and denied.record["event"]["type"] == ["denied"]
    machine, _ = start(b"GET http://a.example.com/ HTTP/1.1")
    unreachable = machine.upstream_failed(UpstreamUnreachableError("connection refused"))
    assert (unreachable.status, unreachable.keep_alive) == (502, True)
    machine, _ = start(b"GET http://a.example.com/ HTTP/1.1")
    silent = answer_of(machine.upstream_idle(streaming=False))
    assert (silent.status, silent.reason) == (504, "upstream_timeout")
    assert isinstance(machine.upstream_idle(streaming=True), Close)


def test_proxy_limits_judge_the_response_head_and_cap_the_body() -> None:
    limited = policy("proxy_limits: {content_types: [text/*], max_response_bytes: 10}\n")
    machine, _ = start(b"GET http://a.example.com/ HTTP/1.1", limited)
    png = response(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5")
    refusal = answer_of(machine.upstream_head(png, "10.0.0.1", 5, True))
    assert (refusal.status, refusal.reason, refusal.rule) == (
        403,
        "content_type_not_allowed",
        "proxy_limits.content_types",
    )
    machine, _ = start(b"GET http://a.example.com/ HTTP/1.1", limited)
    big = response(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 11")
    refusal = answer_of(machine.upstream_head(big, "10.0.0.1", 11, True))
    assert (refusal.status, refusal.reason, refusal.keep_alive) == (
        502,
        "response_too_large",
        False,
    )
    # Chunked: relayed up to the cap, then cut, and a second record says so.
    machine, _ = start(b"GET http://a.example.com/ HTTP/1.1", limited)
    chunked = response(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked")
    relay = machine.upstream_head(chunked, "10.0.0.1", None, True)
    assert isinstance(relay, Relay) and relay.cap == 10
    cut = machine.cut(200)
    assert cut.record is not None and cut.record["error"]["code"] == "response_too_large"
    assert cut.record["event"]["id"] != machine.event_id
    assert cut.record["trace"]["id"] == machine.event_id
    assert cut.record["http"]["response"]["bytes"] == 10


def test_a_record_the_log_cannot_take_turns_the_answer_into_503() -> None:
    machine, _ = start(b"GET http://a.example.com/ HTTP/1.1")
    failed = machine.audit_failed(AuditWriteError("disk full"))
    assert (failed.status, failed.reason, failed.keep_alive, failed.record) == (
        503,
        "unavailable",
        False,
        None,
    )


def test_records_made_before_any_request_is_known() -> None:
    event_id, record = unread_request_record(SOURCE, "bare LF", b"GET / HTTP/1.1\nHost: x", 400)
    assert record["event"]["id"] == event_id and record["error"]["code"] == "bad_request"
    assert record["http"]["request"]["method"] == "GET"
    event_id, record = refused_connection_record(SOURCE, RateLimitedError("too many"))
    assert record["http"]["response"]["status_code"] == 503 and record["source"]["port"] == 40000


# --- report mode ---------------------------------------------------------------------------


def test_report_mode_lets_through_and_records_the_would_be_denial() -> None:
    reporting = policy("mode: report\nproxy_limits: {content_types: [text/*]}\n")
    machine, command = start(b"GET http://b.other.org/ HTTP/1.1", reporting)
    assert isinstance(command, Send)
    png = response(b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5")
    relay = machine.upstream_head(png, "10.0.0.1", 5, True)
    assert isinstance(relay, Relay)
    block = relay.record["policy"]
    assert (block["enforced"], block["reason"]) == (False, "content_type_not_allowed")
    assert relay.record["event"]["outcome"] == "success"


# --- CONNECT, the lease, and a lease lost ---------------------------------------------------


def test_a_tunnel_takes_the_lease_and_hands_it_to_the_tunnel() -> None:
    machine, command = start(b"CONNECT a.example.com:443 HTTP/1.1", who=client())
    assert isinstance(command, Acquire)
    lease = CountedLease()
    opening = machine.leased(lease)
    assert isinstance(opening, OpenTunnel) and opening.verdict.host == "a.example.com"
    started = machine.opened("10.0.0.1")
    assert isinstance(started, StartTunnel) and started.lease is lease
    assert started.record["event"]["action"] == "proxy_connect"
    assert started.record["http"]["response"]["status_code"] == 200
    assert machine.end() is None  # the tunnel's now


def test_a_lease_lost_with_its_client_is_handed_back_and_the_decision_recorded() -> None:
    """The client goes away after the lease was taken and before any answer: the machine
    still records what the policy allowed (and how the request ended), and the lease goes
    back exactly once, whether the request was a tunnel opening or a plain request."""
    machine, _ = start(b"CONNECT a.example.com:443 HTTP/1.1", who=client())
    lease = CountedLease()
    machine.leased(lease)
    closed = machine.opened("10.0.0.1", gone=("client_error", "the client went away"))
    assert isinstance(closed, Close) and closed.record is not None
    assert closed.record["error"]["code"] == "client_error"
    assert closed.record["policy"]["decision"] == "allow"
    assert machine.end() is lease and machine.end() is None
    machine, _ = start(b"GET http://a.example.com/ HTTP/1.1", who=client())
    lease = CountedLease()
    assert isinstance(machine.leased(lease), Send)
    record = machine.abandoned("client_closed", "the client went away before its answer")
    assert record is not None and record["error"]["code"] == "client_closed"
    assert machine.abandoned("client_closed", "again") is None  # one record
    assert machine.end() is lease


def test_provenance_is_asked_for_when_the_policy_watches_it() -> None:
    watching = policy("dlp: {mode: report, untrusted_hosts: enforce}\n")
    who = client(rules=watching)
    machine, command = start(b"GET http://a.example.com/ HTTP/1.1", who=who)
    assert isinstance(command, CheckProvenance)
    assert (command.client_id, command.sent) == ("agent", "http://a.example.com/")
    assert isinstance(machine.provenance_checked(command.verdict), Acquire)
    refused = command.verdict.refused(Decision(False, Reason.SENSITIVE_DATA, "dlp", "p", "0"))
    other = flow(b"GET http://a.example.com/ HTTP/1.1")
    other.identified(who, watching, draining=False)
    denied = other.provenance_checked(refused)
    assert isinstance(denied, Answer) and denied.status == 403


# --- a reload mid-request -------------------------------------------------------------------


def test_a_reload_mid_request_finishes_the_request_then_closes_what_is_now_refused() -> None:
    who = client()
    before = PolicyState(policy(), (who,))
    machine, command = start(b"GET http://a.example.com/ HTTP/1.1", before.default_policy, who)
    assert isinstance(command, Acquire)
    assert isinstance(machine.leased(CountedLease()), Send)
    # The reload lands now: a.example.com is no longer allowed for this client.
    stricter = policy(domains="{allow: [.other.org]}")
    after = PolicyState(stricter, (client(rules=stricter),))
    # In flight, the request goes on under the policy it started with.
    relay = machine.upstream_head(response(), "93.184.216.34", 5, True)
    assert isinstance(relay, Relay) and relay.record["policy"]["decision"] == "allow"
    # Once idle, its keep-alive connection is re-decided under the new state.
    own: tuple = ()
    assert after_reload(before, who, machine.reached, own_addresses=own) is None
    assert after_reload(after, who, machine.reached, own_addresses=own) == "policy_reload"
    rotated = PolicyState(policy(), (client(token=b"new"),))
    assert after_reload(rotated, who, machine.reached, own_addresses=own) == "client_removed"
    assert after_reload(PolicyState(policy()), who, None, own_addresses=own) == "client_removed"
    # No clients before, clients now: an anonymous connection has no one to be any more.
    assert after_reload(before, None, None, own_addresses=own) == "client_removed"
    assert after_reload(PolicyState(policy()), None, machine.reached, own_addresses=own) is None


def test_a_tunnel_is_re_decided_with_the_connect_ports() -> None:
    who = client()
    machine, _ = start(b"CONNECT a.example.com:443 HTTP/1.1", who=who)
    machine.leased(CountedLease())
    started = machine.opened("93.184.216.34")
    assert isinstance(started, StartTunnel)
    state = PolicyState(policy(), (who,))
    reached = (started.verdict, started.ip)
    assert after_reload(state, who, reached, own_addresses=(), connect_ports=(443,)) is None
    assert (
        after_reload(state, who, reached, own_addresses=(), connect_ports=(8443,))
        == "policy_reload"
    )


def test_a_tunnels_first_bytes_and_its_close_are_the_machines() -> None:
    machine, _ = start(b"CONNECT a.example.com:443 HTTP/1.1", who=client())
    machine.leased(CountedLease())
    started = machine.opened("93.184.216.34")
    assert isinstance(started, StartTunnel)
    tunnel = started.flow
    assert tunnel.first_bytes(server_name="a.example.com") is None
    assert tunnel.first_bytes(server_name="b.example.net") == "sni_mismatch"
    record = tunnel.closed("sni_mismatch", duration_ms=3, bytes_up=517, bytes_down=0)
    assert (
        record["event"]["action"] == "tunnel_close" and record["event"]["reason"] == "sni_mismatch"
    )
    assert record["event"]["id"] == machine.event_id and record["event"]["outcome"] == "failure"
    assert record["source"]["bytes"] == 517
    # A tunnel that ends on its own says how, with no refusal on it.
    machine, _ = start(b"CONNECT a.example.com:443 HTTP/1.1")
    started = machine.opened("93.184.216.34")
    assert isinstance(started, StartTunnel) and started.lease is FREE_LEASE
    assert started.flow.first_bytes(not_tls="SSH-2.0 banner") == "not_tls"
    other, _ = start(b"CONNECT a.example.com:443 HTTP/1.1")
    plain = other.opened("93.184.216.34")
    assert isinstance(plain, StartTunnel)
    closed = plain.flow.closed("closed", duration_ms=1, bytes_up=1, bytes_down=2)
    assert closed["event"]["outcome"] == "success" and closed["destination"]["bytes"] == 2
