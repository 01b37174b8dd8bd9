"""The forward-traffic use case without a socket: each decision the proxy adapter asks for,
with its reason and rule, under enforce and report mode."""

from __future__ import annotations

import pytest

from gateway.errors import ResponseTooLargeError
from gateway.policy.engine import Reason
from gateway.policy.load import load_policy_bytes
from gateway.policy.model import Policy
from gateway.tools import forward
from gateway.tools.sightings import InMemoryHostSightings

AWS_KEY = "AKIAQ3EGRT5LWX7ZP2NB"
ALLOWED = "{allow: [.example.com]}"
HIGH_ENTROPY = "q7f3k9x2m8v1z5b4n6c0p3r7t2w9y4h8j1l5s6d0"  # no detector's shape, but random


def policy(text: str = "", *, domains: str = "{allow: [.example.com]}", default="deny") -> Policy:
    base = f"name: fwd\ndefault: {default}\ndomains: {domains}\nmethods: [GET, POST]\n"
    loaded, _ = load_policy_bytes((base + text).encode(), source="fwd.yaml", default_name="fwd")
    return loaded


def test_a_plain_request_is_decided_by_url_and_method() -> None:
    decision, target = forward.decide_request(policy(), "http://a.example.com/x", "GET", [])
    assert decision.allowed and decision.rule == "domains.allow[0]" and target is not None
    decision, _ = forward.decide_request(policy(), "http://a.example.com/x", "DELETE", [])
    assert (decision.allowed, decision.reason, decision.rule) == (
        False,
        Reason.METHOD_NOT_ALLOWED,
        "methods",
    )
    decision, target = forward.decide_request(policy(), "http://[bad/", "GET", [])
    assert decision.reason is Reason.INVALID_URL and target is None


def test_dlp_looks_at_headers_and_the_body_prefix() -> None:
    guarded = policy("dlp: {mode: enforce, body_prefix_bytes: 64}\n")
    headers = [("X-Key", AWS_KEY)]
    decision, _ = forward.decide_request(guarded, "http://a.example.com/", "POST", headers)
    assert (decision.allowed, decision.reason) == (False, Reason.SENSITIVE_DATA)
    decision, _ = forward.decide_request(guarded, "http://a.example.com/", "POST", [])
    assert decision.allowed
    assert not forward.decide_body(guarded, decision, f"k={AWS_KEY}".encode()).allowed
    # Past the prefix, the body is not looked at.
    late = b"x" * 64 + AWS_KEY.encode()
    assert forward.decide_body(guarded, decision, late) is decision


@pytest.mark.parametrize(
    ("authority", "parsed"),
    [
        ("a.example.com:443", ("a.example.com", 443)),
        ("[::1]:8443", ("::1", 8443)),
        ("a.example.com", None),
        ("a.example.com:443/x", None),
        ("user@a.example.com:443", None),
        ("::1:443", None),
    ],
)
def test_connect_targets(authority: str, parsed: tuple[str, int] | None) -> None:
    target = forward.connect_target(authority)
    assert (None if target is None else (target.host, target.port)) == parsed


@pytest.mark.parametrize("mode", ["enforce", "report"])
def test_connect_ports_are_step_two_of_the_engine(mode: str) -> None:
    judged = policy(f"mode: {mode}\nports: [443, 8443]\n")
    target = forward.connect_target("a.example.com:8443")
    assert target is not None
    decision = forward.decide_connect(judged, target, "a.example.com:8443", (443,))
    assert (decision.reason, decision.rule) == (Reason.PORT_NOT_ALLOWED, "proxy.connect_ports")
    assert decision.allowed is (mode == "report") and decision.enforced is (mode == "enforce")
    text = forward.refusal_message(decision)
    assert "by the gateway configuration (proxy.connect_ports; policy 'fwd')" in text
    assert "8443 (tunnels go to 443)" in text
    assert "add the port to proxy.connect_ports in the gateway configuration" in text
    allowed = forward.decide_connect(judged, target, "a.example.com:8443", (443, 8443))
    assert allowed.allowed and allowed.reason is None


def test_a_connect_host_carrying_a_secret_is_refused_before_any_lookup() -> None:
    guarded = policy("dlp: {mode: enforce}\n")
    authority = f"{HIGH_ENTROPY}.example.com:443"
    target = forward.connect_target(authority)
    assert target is not None
    decision = forward.decide_connect(guarded, target, authority, (443,))
    assert decision.reason is Reason.SENSITIVE_DATA


@pytest.mark.parametrize(
    ("text", "content_type", "allowed", "reason"),
    [
        ("", "image/png", True, None),  # off by default
        ("proxy_limits: {content_types: [text/*]}\n", "text/html; charset=utf-8", True, None),
        (
            "proxy_limits: {content_types: [text/*]}\n",
            "image/png",
            False,
            Reason.CONTENT_TYPE_NOT_ALLOWED,
        ),
        ("proxy_limits: {content_types: [text/*]}\n", None, False, Reason.CONTENT_TYPE_NOT_ALLOWED),
        (
            "mode: report\nproxy_limits: {content_types: [text/*]}\n",
            "image/png",
            True,
            Reason.CONTENT_TYPE_NOT_ALLOWED,
        ),
    ],
    ids=["off", "listed", "unlisted", "no-type", "report"],
)
def test_response_heads(text: str, content_type: str | None, allowed: bool, reason) -> None:
    decision = forward.decide_response_head(policy(text), content_type)
    assert (decision.allowed, decision.reason, decision.rule) == (
        allowed,
        reason,
        "proxy_limits.content_types",
    )


def test_the_byte_cap_and_its_error() -> None:
    assert forward.response_byte_cap(policy()) is None
    capped = policy("proxy_limits: {max_response_bytes: 1000}\n")
    assert forward.response_byte_cap(capped) == 1000
    error = forward.too_large(capped, 5000)
    assert isinstance(error, ResponseTooLargeError)
    assert error.rule == "proxy_limits.max_response_bytes"
    assert "5000 bytes" in error.message and "(1000)" in error.message


@pytest.mark.parametrize(
    ("text", "domains", "ip", "connect_ports", "stays"),
    [
        ("", ALLOWED, "93.184.216.34", None, True),
        # the new policy blocks the address it is connected to
        ("", ALLOWED, "10.0.0.1", None, False),
        ("", "{deny: [a.example.com]}", "93.184.216.34", None, False),
        ("", ALLOWED, "93.184.216.34", (8443,), False),  # a tunnel to a port no longer listed
        ("mode: report\n", "{}", "93.184.216.34", None, True),
    ],
    ids=["allowed", "private-address", "denied-host", "connect-port", "report"],
)
def test_still_allowed_after_a_reload(
    text: str, domains: str, ip: str, connect_ports: tuple[int, ...] | None, stays: bool
) -> None:
    target = forward.connect_target("a.example.com:443")
    assert target is not None
    assert (
        forward.still_allowed(
            policy(text, domains=domains), target, ip, own_addresses=(), connect_ports=connect_ports
        )
        is stays
    )


async def test_provenance_flags_secrets_sent_to_hosts_seen_only_in_content() -> None:
    guarded = policy(
        "dlp: {mode: report, untrusted_hosts: enforce}\n", domains="{}", default="allow"
    )
    sightings = InMemoryHostSightings()
    await sightings.seen_in_content("agent", ["drop.example.org"])
    url = f"http://drop.example.org/?k={HIGH_ENTROPY}"
    decision, target = forward.decide_request(guarded, url, "GET", [])
    assert target is not None
    flagged = await forward.check_provenance(guarded, sightings, "agent", decision, target, url)
    assert flagged.dlp is not None and flagged.dlp.detector == "untrusted_host"
    # A host the client asked for itself is marked so.
    plain, other = forward.decide_request(guarded, "http://b.example.org/", "GET", [])
    assert other is not None
    await forward.check_provenance(guarded, sightings, "agent", plain, other, None)
    assert not await sightings.only_from_content("agent", "b.example.org")


@pytest.mark.parametrize("mode", ["enforce", "report"])
def test_a_tunnels_first_bytes_are_judged_in_every_mode(mode: str) -> None:
    judged = policy(f"mode: {mode}\n")
    target = forward.connect_target("a.example.com:443")
    assert target is not None
    tunnel = forward.Verdict(judged, forward.decide_connect(judged, target, "a", (443,)), target)
    ok = tunnel.tunnel_start(server_name="a.example.com").decision
    assert ok.allowed and ok.rule == "proxy.require_tls"
    assert tunnel.tunnel_start().allowed  # no SNI sent
    ssh = tunnel.tunnel_start(not_tls="SSH-2.0 banner").decision
    assert (ssh.allowed, ssh.reason, ssh.enforced) == (False, Reason.NOT_TLS, True)
    fronted = tunnel.tunnel_start(server_name="b.example.net").decision
    assert (fronted.allowed, fronted.reason) == (False, Reason.SNI_MISMATCH)
    assert "by the gateway configuration (proxy.require_tls" in forward.refusal_message(fronted)
