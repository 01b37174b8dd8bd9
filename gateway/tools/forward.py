"""Forward traffic as a use case: every decision the proxy port's adapter asks for. A plain
`http://` request (its line, headers and body prefix), a CONNECT (the gateway
configuration's `proxy.connect_ports` applied by the engine, so report mode and explain see
it), a response head (`proxy_limits`), a tunnel's first bytes (`proxy.require_tls`), and,
after a reload, whether a live tunnel or keep-alive connection may stay open.

The machine of one request (`tools/forward_flow.py`) asks these decisions in their order and
builds its records from a `ProxyCall` through `tools/records.py`; the adapter
(`server/proxy/`) only feeds that machine and carries out its commands, and never names a
policy type, this module or `fetch`. This module loads no outbound client: `policy explain`
uses its decisions without aiohttp.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Collection, Iterable
from typing import Any

from gateway.errors import ResponseTooLargeError
from gateway.policy.dlp import UNTRUSTED_HOST, DlpMode
from gateway.policy.engine import (
    Decision,
    Reason,
    decide_address,
    decide_proxied_content_type,
    decide_target,
    decide_tunnel_start,
    decide_untrusted_host,
    decide_url,
    with_finding,
)
from gateway.policy.hints import refusal_text
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.urls import InvalidURLError, Target, parse_url
from gateway.tools.records import new_event_id, proxy_record, tunnel_close_record
from gateway.tools.sightings import HostSightings

MAX_RESPONSE_BYTES_RULE = "proxy_limits.max_response_bytes"


def decide_request(
    policy: Policy, url: str, method: str, headers: Iterable[tuple[str, str]]
) -> tuple[Decision, Target | None]:
    """Steps 1-3 for an absolute-form request, `methods` included, then step 2b on its
    end-to-end `headers` (the request line's URL is scanned by the engine itself)."""
    decision, target = decide_url(policy, url, tool=None, method=method)
    if target is not None and decision.allowed and policy.dlp.active:
        finding = policy.dlp.scan_headers(headers)
        if finding is not None:
            decision = with_finding(policy, decision, finding)
    return decision, target


def decide_body(policy: Policy, decision: Decision, body: bytes) -> Decision:
    """Step 2b on a request body's first `dlp.body_prefix_bytes`, before a byte leaves."""
    if not body or not policy.dlp.active or not policy.dlp.body_prefix_bytes:
        return decision
    finding = policy.dlp.scan_body(body[: policy.dlp.body_prefix_bytes])
    return decision if finding is None else with_finding(policy, decision, finding)


def connect_target(authority: str) -> Target | None:
    """`host:port` of a CONNECT; None for anything else (paths, user info, no port)."""
    if any(c in authority for c in "/?#@\\") or not authority:
        return None
    host, colon, port = authority.rpartition(":")
    if not colon or not port.isdigit() or not host or (host.count(":") and host[0] != "["):
        return None
    try:
        target = parse_url(f"https://{authority}/")
    except InvalidURLError:
        return None
    return target if target.port == int(port) else None


def decide_connect(
    policy: Policy, target: Target, authority: str, connect_ports: Collection[int]
) -> Decision:
    """Steps 2-3 for a tunnel: `proxy.connect_ports`, then the policy's scheme, ports, DLP on
    the CONNECT host (as `https://host:port`) and domain rules."""
    return decide_target(
        policy, target, tool=None, sent=f"https://{authority}", connect_ports=connect_ports
    )


def same_authority(host_header: str, target: Target, request_target: str = "") -> bool:
    """Whether a Host header names the same host and port as the absolute URI."""
    authority = request_target.partition("://")[2].partition("/")[0]
    if authority and "@" not in authority and host_header.lower() == authority.lower():
        return True  # the usual case, spelled alike: no second parse
    try:
        parsed = parse_url(f"{target.scheme}://{host_header}/")
    except InvalidURLError:
        return False
    return parsed.host == target.host and parsed.port == target.port and "/" not in host_header


async def check_provenance(
    policy: Policy,
    sightings: HostSightings,
    client: str,
    decision: Decision,
    target: Target,
    sent: str | None,
) -> Decision:
    """dlp.untrusted_hosts: a request carrying secret-shaped data (`sent`, a plain-HTTP
    request's URL) to a host this client has only seen inside web content is flagged; any
    other allowed request marks its host as one the client asked for itself."""
    if not decision.allowed or not policy.dlp.active:
        return decision
    if policy.dlp.untrusted_hosts is DlpMode.OFF:
        return decision
    if sent is not None:
        seen = await sightings.only_from_content(client, target.host)
        decision = decide_untrusted_host(policy, decision, target, sent, only_from_content=seen)
    if decision.dlp is None or decision.dlp.detector != UNTRUSTED_HOST:
        await sightings.requested(client, target.host)
    return decision


def decide_response_head(policy: Policy, content_type: str | None) -> Decision:
    """After a plain-HTTP response's head, before a byte of its body is relayed: its media
    type against `proxy_limits.content_types` (every type when the policy leaves it unset)."""
    return decide_proxied_content_type(policy, content_type)


def response_byte_cap(policy: Policy) -> int | None:
    """`proxy_limits.max_response_bytes`: the most body bytes relayed (None: no cap)."""
    return policy.proxy_limits.max_response_bytes


def too_large(policy: Policy, length: int | None = None) -> ResponseTooLargeError:
    """The error of a response past `proxy_limits.max_response_bytes` (`length`: as announced
    by its Content-Length, refused before the body; None: cut while streaming)."""
    cap = policy.proxy_limits.max_response_bytes
    said = f"the response is {length} bytes" if length is not None else "the response went on"
    return ResponseTooLargeError(
        f"{said}, past proxy_limits.max_response_bytes ({cap}) of policy {policy.name!r}",
        rule=MAX_RESPONSE_BYTES_RULE,
    )


def refusal_message(
    decision: Decision,
    target: Target | None = None,
    own_addresses: Collection[tuple[IPNetwork, int]] = (),
) -> str:
    """The one-line body of a refusal: the decision and how to allow it (or that nothing
    can: the `target` a metadata or the gateway's own address)."""
    text = refusal_text(decision, target=target, own_addresses=own_addresses)
    return "refused by the gateway: " + text


def still_allowed(
    policy: Policy,
    target: Target,
    ip: str | None,
    *,
    own_addresses: Collection[tuple[IPNetwork, int]],
    connect_ports: Collection[int] | None = None,
) -> bool:
    """After a reload: whether a live tunnel (`connect_ports` given) or a keep-alive
    connection to `target`, connected to `ip`, may stay open under `policy`. Report mode
    keeps open what it would have let open."""
    decision = decide_target(policy, target, tool=None, connect_ports=connect_ports)
    if decision.allowed and ip is not None:
        address = ipaddress.ip_address(ip)
        decision = decide_address(policy, address, target.port, own_addresses=own_addresses)
    return decision.allowed


# --- the use case as the adapter holds it ----------------------------------------------


class Verdict:
    """One answer of the use case on a proxied request or tunnel (its URL or CONNECT, its
    body, its response head, its first tunnel bytes), as the adapter uses it: whether it may
    go on and, when not, what the refusal says. The policy's decision and the parsed target
    travel inside, for the records; the adapter never reads them."""

    __slots__ = ("policy", "decision", "target", "own_addresses")

    def __init__(
        self,
        policy: Policy,
        decision: Decision,
        target: Target | None,
        own_addresses: Collection[tuple[IPNetwork, int]] = (),
    ) -> None:
        self.policy = policy
        self.decision = decision
        self.target = target
        self.own_addresses = own_addresses  # for the refusal's hint only

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    @property
    def status(self) -> int:
        """The refusal's status: 400 for a URL that does not parse, else 403."""
        return 400 if self.decision.reason is Reason.INVALID_URL else 403

    @property
    def code(self) -> str:
        return str(self.decision.reason)

    @property
    def rule(self) -> str | None:
        return self.decision.rule

    @property
    def message(self) -> str:
        return refusal_message(self.decision, self.target, self.own_addresses)

    @property
    def host(self) -> str:
        assert self.target is not None
        return self.target.host

    @property
    def byte_cap(self) -> int | None:
        """`proxy_limits.max_response_bytes`: the most body bytes relayed (None: no cap)."""
        return response_byte_cap(self.policy)

    @property
    def judges_content_types(self) -> bool:
        """Whether `proxy_limits.content_types` judges a response head (else its fields are
        never looked at)."""
        return self.policy.proxy_limits.content_types is not None

    def too_large(self, length: int | None = None) -> ResponseTooLargeError:
        return too_large(self.policy, length)

    def refused(self, decision: Decision) -> Verdict:
        """The same request, refused by `decision` (an address check while dialling)."""
        return Verdict(self.policy, decision, self.target, self.own_addresses)

    def same_authority(self, host_header: str, request_target: str) -> bool:
        assert self.target is not None
        return same_authority(host_header, self.target, request_target)

    def destination(self, ip: str | None) -> dict[str, Any] | None:
        """The record's `destination`: the target's host and port, and the address dialled."""
        if self.target is None:
            return None
        return {"domain": self.target.host, "ip": ip, "port": self.target.port}

    def tunnel_start(
        self, *, not_tls: str | None = None, server_name: str | None = None
    ) -> Verdict:
        """`proxy.require_tls` on a tunnel's first bytes: a TLS ClientHello (`not_tls` says
        what they are instead) whose server name, when sent, is the CONNECT host."""
        decision = decide_tunnel_start(
            self.policy, self.host, not_tls=not_tls, server_name=server_name
        )
        return Verdict(self.policy, decision, self.target, self.own_addresses)


class ProxyCall:
    """One request on the proxy port as the use case sees it: who asks, under which policy,
    what the policy allowed; its records are built here, through `tools/records.py`."""

    __slots__ = (
        "event_id",
        "started",
        "action",
        "source",
        "url",
        "method",
        "client_id",
        "policy",
        "allowed",
    )

    def __init__(self, *, source: tuple[str, int] | None, url: str, method: str) -> None:
        self.event_id = new_event_id()
        self.started = time.monotonic()
        self.action = "proxy_connect" if method == "CONNECT" else "proxy_http"
        self.source = source
        self.url = url
        self.method = method
        self.client_id: str | None = None
        self.policy: Policy | None = None
        # What the policy allowed, until a record names it: a request abandoned in between
        # (its client went away) is still recorded with it.
        self.allowed: Verdict | None = None

    def record(self, verdict: Verdict | None = None, **fields: Any) -> dict[str, Any]:
        """A `proxy_http` or `proxy_connect` record of this request, with `verdict`'s
        decision (None: no rule decided) and what DLP reported on the allowed request."""
        record = proxy_record(
            self.action,
            event_id=self.event_id,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            client_id=self.client_id,
            policy=self.policy,
            decision=None if verdict is None else verdict.decision,
            source=self.source,
            url=self.url,
            method=self.method,
            request_id=self.event_id,
            **fields,
        )
        allowed = self.allowed
        if "dlp" not in record and allowed is not None and allowed.decision.dlp is not None:
            # What DLP reported stays on the record of a request that then failed.
            record["dlp"] = allowed.decision.dlp.to_record()
        return record

    def tunnel_close(
        self,
        verdict: Verdict,
        *,
        end: str,
        duration_ms: int,
        bytes_up: int,
        bytes_down: int,
        ip: str,
        tls: Verdict | None = None,
    ) -> dict[str, Any]:
        """The `tunnel_close` record of this CONNECT's tunnel (`tls`: a refused start)."""
        return tunnel_close_record(
            event_id=self.event_id,
            client_id=self.client_id,
            policy=verdict.policy,
            end=end,
            duration_ms=duration_ms,
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            destination=verdict.destination(ip) or {},
            tls_decision=None if tls is None else tls.decision,
        )


def watches_provenance(policy: Policy) -> bool:
    """Whether `check_provenance` has anything to do under `policy` (dlp.untrusted_hosts)."""
    return policy.dlp.active and policy.dlp.untrusted_hosts is not DlpMode.OFF
