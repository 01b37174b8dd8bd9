"""Refusal texts: every denial names the key that would allow it; address refusals never
name the address a host resolved to."""

from __future__ import annotations

import ipaddress

import pytest

from gateway.policy.engine import Decision, Reason, decide_address, decide_url
from gateway.policy.hints import how_to_allow, refusal_text
from tests.policy.conftest import make_policy


@pytest.mark.parametrize(
    ("policy_fields", "url", "key"),
    [
        ({"allow": ["example.com"]}, "https://other.org/", "domains.allow"),
        (
            {"allow": ["example.com"], "deny": ["bad.example.com"]},
            "https://bad.example.com/",
            "domains.deny[0]",
        ),
        ({"allow": ["example.com"], "schemes": ("https",)}, "http://example.com/", "schemes"),
        ({"allow": ["example.com"]}, "https://example.com:8443/", "ports"),
        ({"allow": ["example.com"]}, "https://10.0.0.5/", "networks.allow"),
    ],
)
def test_every_url_refusal_names_the_key_that_allows_it(policy_fields, url, key) -> None:
    decision, _ = decide_url(make_policy(**policy_fields), url)
    assert not decision.allowed
    hint = how_to_allow(decision)
    assert hint is not None and hint.startswith("to allow it, ") and key in hint
    assert "\n" not in refusal_text(decision)


def test_every_reason_has_a_line() -> None:
    for reason in Reason:
        if reason is Reason.INVALID_URL:
            continue
        decision = Decision(False, reason, "some.rule", "p", "0" * 64)
        assert how_to_allow(decision), reason


def test_a_private_answer_is_refused_without_its_address() -> None:
    policy = make_policy(allow=["internal.example.com"])
    decision = decide_address(policy, ipaddress.ip_address("10.20.0.7"), 443)
    assert decision.reason is Reason.PRIVATE_ADDRESS
    assert "10.20.0.7" in (decision.detail or "")  # the operator's explain output keeps it
    text = refusal_text(decision)
    assert "10.20.0.7" not in text and "10." not in text
    assert "networks.allow" in text


def test_network_deny_and_metadata_hide_the_address() -> None:
    policy = make_policy(net_deny=["10.0.0.0/8"])
    denied = decide_address(policy, ipaddress.ip_address("10.1.2.3"), 443)
    assert denied.rule == "networks.deny[0]"
    assert "10.1.2.3" not in refusal_text(denied)
    assert "remove or narrow networks.deny[0]" in refusal_text(denied)
    metadata = decide_address(policy, ipaddress.ip_address("169.254.169.254"), 80)
    assert "169.254" not in refusal_text(metadata)
    assert "never allowed" in refusal_text(metadata)


def test_the_rules_own_message_is_kept() -> None:
    policy = make_policy(deny=[("evil.example", "ask security first")])
    decision, _ = decide_url(policy, "https://evil.example/")
    assert "ask security first" in refusal_text(decision)


def test_connect_ports_live_in_the_gateway_configuration() -> None:
    decision = Decision(False, Reason.PORT_NOT_ALLOWED, "proxy.connect_ports", "p", "0" * 64)
    assert "proxy.connect_ports in the gateway configuration" in (how_to_allow(decision) or "")


OWN = ((ipaddress.ip_network("127.0.0.1/32"), 8080),)


@pytest.mark.parametrize(
    ("url", "own", "reason", "expected"),
    [
        ("http://169.254.169.254/latest/", (), "ip_literal_not_allowed", "cloud metadata"),
        ("http://169.254.169.254:8080/", (), "port_not_allowed", "cloud metadata"),
        ("gopher://example.com/", (), "scheme_not_allowed", "does not fetch 'gopher' URLs"),
        ("http://[fd00:ec2::254]/", (), "ip_literal_not_allowed", "cloud metadata"),
        ("http://127.0.0.1:8080/", OWN, "port_not_allowed", "its own listening address"),
        ("http://[::ffff:127.0.0.1]:8080/", OWN, "port_not_allowed", "its own listening"),
        ("http://127.0.0.1:8080/", (), "port_not_allowed", "to allow it, add the port to ports"),
        ("http://127.0.0.1:8081/", OWN, "port_not_allowed", "to allow it, add the port"),
        ("http://127.0.0.1/", OWN, "ip_literal_not_allowed", "to allow it, add a CIDR"),
    ],
)
def test_a_hint_never_names_a_change_that_cannot_allow(url, own, reason, expected) -> None:
    """A destination no policy opens (metadata, the gateway's own address and port) is
    `never allowed`, whichever URL step refused it first; otherwise the key that would."""
    decision, target = decide_url(make_policy(allow=["example.com"]), url)
    assert str(decision.reason) == reason
    hint = how_to_allow(decision, target=target, own_addresses=own)
    assert hint is not None and expected in hint, hint
    if "never allowed" in hint:
        assert "networks.allow" not in hint and "ports" not in hint
        assert hint in refusal_text(decision, target=target, own_addresses=own)


def test_a_metadata_literal_is_never_allowed_even_without_its_target() -> None:
    """The engine names the literal in an ip_literal_not_allowed refusal: that is enough."""
    decision, _ = decide_url(make_policy(), "http://169.254.169.254/")
    hint = how_to_allow(decision) or ""
    assert hint.startswith("never allowed: cloud metadata") and "networks.allow" not in hint
    assert "169.254" not in refusal_text(decision).split(":", 1)[-1].split(";")[-1]
