"""The decision table: every case asserts the decision, the reason and the rule."""

from __future__ import annotations

import ipaddress
from types import MappingProxyType

import pytest

from gateway.policy.engine import (
    Reason,
    decide_address,
    decide_answer,
    decide_content_type,
    decide_query,
    decide_tool,
    decide_url,
)
from gateway.policy.model import Action, Mode, Policy, ResultsHandling, ToolSettings
from tests.policy.conftest import make_policy

ALLOWLIST = make_policy(
    allow=["docs.python.org", ".wikipedia.org", "*.readthedocs.io", "api.example.com"],
    deny=["upload.wikipedia.org", (".pastebin.com", "paste sites are closed"), "*.example.com"],
    net_allow=["10.20.0.0/16"],
    net_deny=["10.20.5.0/24", "203.0.113.0/24"],
)
OPEN = make_policy(default=Action.ALLOW, deny=[".zip"], net_allow=["10.20.0.0/16"])

URL_CASES = [
    # (id, policy, url, allowed, reason, rule)
    ("exact allow", ALLOWLIST, "https://docs.python.org/3/", True, None, "domains.allow[0]"),
    (
        "exact does not cover subdomain",
        ALLOWLIST,
        "https://www.docs.python.org/",
        False,
        Reason.DOMAIN_NOT_ALLOWED,
        "default",
    ),
    (
        "dot pattern covers apex",
        ALLOWLIST,
        "https://wikipedia.org/",
        True,
        None,
        "domains.allow[1]",
    ),
    (
        "dot pattern covers deep subdomain",
        ALLOWLIST,
        "https://a.b.en.wikipedia.org/",
        True,
        None,
        "domains.allow[1]",
    ),
    (
        "star pattern excludes apex",
        ALLOWLIST,
        "https://readthedocs.io/",
        False,
        Reason.DOMAIN_NOT_ALLOWED,
        "default",
    ),
    (
        "star pattern any depth",
        ALLOWLIST,
        "https://a.b.readthedocs.io/",
        True,
        None,
        "domains.allow[2]",
    ),
    (
        "suffix trick",
        ALLOWLIST,
        "https://evilwikipedia.org/",
        False,
        Reason.DOMAIN_NOT_ALLOWED,
        "default",
    ),
    (
        "suffix appended",
        ALLOWLIST,
        "https://docs.python.org.evil.com/",
        False,
        Reason.DOMAIN_NOT_ALLOWED,
        "default",
    ),
    (
        "deny wins over allow",
        ALLOWLIST,
        "https://upload.wikipedia.org/x",
        False,
        Reason.DOMAIN_DENIED,
        "domains.deny[0]",
    ),
    (
        "deny star does not deny apex exact allow",
        ALLOWLIST,
        "https://api.example.com/",
        False,
        Reason.DOMAIN_DENIED,
        "domains.deny[2]",
    ),
    (
        "deny with message",
        ALLOWLIST,
        "https://pastebin.com/raw/1",
        False,
        Reason.DOMAIN_DENIED,
        "domains.deny[1]",
    ),
    (
        "case and trailing dot",
        ALLOWLIST,
        "https://DOCS.Python.ORG./",
        True,
        None,
        "domains.allow[0]",
    ),
    ("scheme", ALLOWLIST, "ftp://docs.python.org/", False, Reason.SCHEME_NOT_ALLOWED, "schemes"),
    ("port", ALLOWLIST, "https://docs.python.org:8443/", False, Reason.PORT_NOT_ALLOWED, "ports"),
    ("invalid", ALLOWLIST, "docs.python.org", False, Reason.INVALID_URL, "url"),
    (
        "ip literal under default deny",
        ALLOWLIST,
        "http://8.8.8.8/",
        False,
        Reason.IP_LITERAL_NOT_ALLOWED,
        "default",
    ),
    (
        "private ip literal under default deny",
        ALLOWLIST,
        "http://127.1/",
        False,
        Reason.IP_LITERAL_NOT_ALLOWED,
        "default",
    ),
    (
        "ip literal in networks.allow",
        ALLOWLIST,
        "http://10.20.0.7/",
        True,
        None,
        "networks.allow[0]",
    ),
    ("public ip literal under default allow", OPEN, "http://8.8.8.8/", True, None, "default"),
    (
        "private ip literal under default allow",
        OPEN,
        "http://0x7f.1/",
        False,
        Reason.PRIVATE_ADDRESS,
        "networks.block_private",
    ),
    (
        "metadata decimal under default allow",
        OPEN,
        "http://2852039166/latest",
        False,
        Reason.METADATA_ADDRESS,
        "networks.metadata",
    ),
    (
        "mapped metadata under default allow",
        OPEN,
        "http://[::ffff:169.254.169.254]/",
        False,
        Reason.METADATA_ADDRESS,
        "networks.metadata",
    ),
    ("default allow name", OPEN, "https://anything.example/", True, None, "default"),
    ("deny suffix", OPEN, "https://evil.zip/", False, Reason.DOMAIN_DENIED, "domains.deny[0]"),
    (
        "ip literal never matches domain pattern",
        make_policy(allow=["127.0.0.1"] if False else ["localhost"]),
        "http://127.0.0.1/",
        False,
        Reason.IP_LITERAL_NOT_ALLOWED,
        "default",
    ),
]


@pytest.mark.parametrize(
    ("policy", "url", "allowed", "reason", "rule"),
    [c[1:] for c in URL_CASES],
    ids=[c[0] for c in URL_CASES],
)
def test_decide_url(policy, url, allowed, reason, rule) -> None:
    decision, _ = decide_url(policy, url)
    assert (decision.allowed, decision.reason, decision.rule) == (allowed, reason, rule)
    assert decision.policy_name == policy.name
    assert decision.policy_sha256 == policy.sha256
    assert decision.enforced


def test_deny_rule_message_reaches_the_decision() -> None:
    decision, _ = decide_url(ALLOWLIST, "https://www.pastebin.com/")
    assert decision.message == "paste sites are closed"
    assert "paste sites are closed" in decision.describe()


ADDRESS_CASES = [
    ("public", ALLOWLIST, "93.184.216.34", True, None, "networks"),
    ("loopback", ALLOWLIST, "127.0.0.1", False, Reason.PRIVATE_ADDRESS, "networks.block_private"),
    ("rfc1918", ALLOWLIST, "192.168.1.1", False, Reason.PRIVATE_ADDRESS, "networks.block_private"),
    ("metadata", ALLOWLIST, "169.254.169.254", False, Reason.METADATA_ADDRESS, "networks.metadata"),
    (
        "metadata even when allowed",
        make_policy(net_allow=["169.254.0.0/16"]),
        "169.254.169.254",
        False,
        Reason.METADATA_ADDRESS,
        "networks.metadata",
    ),
    ("networks.allow exempts", ALLOWLIST, "10.20.0.7", True, None, "networks.allow[0]"),
    (
        "networks.deny inside allowed range still denies",
        ALLOWLIST,
        "10.20.5.9",
        False,
        Reason.NETWORK_DENIED,
        "networks.deny[0]",
    ),
    (
        "networks.deny on public",
        ALLOWLIST,
        "203.0.113.5",
        False,
        Reason.NETWORK_DENIED,
        "networks.deny[1]",
    ),
    (
        "mapped ipv6 judged by ipv4 rules",
        ALLOWLIST,
        "::ffff:10.20.5.9",
        False,
        Reason.NETWORK_DENIED,
        "networks.deny[0]",
    ),
    ("ipv6 ula", ALLOWLIST, "fd12::1", False, Reason.PRIVATE_ADDRESS, "networks.block_private"),
    ("block_private off", make_policy(block_private=False), "10.0.0.1", True, None, "networks"),
    (
        "block_private off keeps metadata",
        make_policy(block_private=False),
        "fd00:ec2::254",
        False,
        Reason.METADATA_ADDRESS,
        "networks.metadata",
    ),
]


@pytest.mark.parametrize(
    ("policy", "ip", "allowed", "reason", "rule"),
    [c[1:] for c in ADDRESS_CASES],
    ids=[c[0] for c in ADDRESS_CASES],
)
def test_decide_address(policy, ip, allowed, reason, rule) -> None:
    decision = decide_address(policy, ipaddress.ip_address(ip), 443)
    assert (decision.allowed, decision.reason, decision.rule) == (allowed, reason, rule)


def test_decide_address_own_listening_address() -> None:
    own = {(ipaddress.ip_network("127.0.0.0/8"), 8080)}
    policy = make_policy(net_allow=["127.0.0.0/8"])
    denied = decide_address(policy, ipaddress.ip_address("127.0.0.1"), 8080, own_addresses=own)
    assert (denied.allowed, denied.reason, denied.rule) == (
        False,
        Reason.OWN_ADDRESS,
        "networks.own_address",
    )
    other_port = decide_address(policy, ipaddress.ip_address("127.0.0.1"), 8081, own_addresses=own)
    assert other_port.allowed
    mapped = decide_address(
        policy, ipaddress.ip_address("::ffff:127.0.0.2"), 8080, own_addresses=own
    )
    assert mapped.reason is Reason.OWN_ADDRESS


# IPv4-mapped IPv6 CIDRs (::ffff:a.b.c.d/96+n) name the IPv4 addresses they map, too; a deny
# in that form also their NAT64 and 6to4 forms.
MAPPED = make_policy(
    name="mapped",
    allow=["mirror.example"],
    net_allow=["::ffff:10.20.0.0/112"],
    net_deny=["::ffff:93.184.216.0/120", "2606:4700::/32"],
)
IPV6_DENIED = make_policy(name="ipv6-denied", net_deny=["::/0"])


@pytest.mark.parametrize(
    ("policy", "address", "allowed", "reason", "rule"),
    [
        (MAPPED, "10.20.0.7", True, None, "networks.allow[0]"),
        (MAPPED, "::ffff:10.20.0.7", True, None, "networks.allow[0]"),
        (MAPPED, "10.21.0.1", False, Reason.PRIVATE_ADDRESS, "networks.block_private"),
        # Only the mapped form: NAT64 of 10.20.0.7 is another destination (a translator).
        (MAPPED, "64:ff9b::a14:7", False, Reason.PRIVATE_ADDRESS, "networks.block_private"),
        (MAPPED, "93.184.216.34", False, Reason.NETWORK_DENIED, "networks.deny[0]"),
        (MAPPED, "::ffff:93.184.216.34", False, Reason.NETWORK_DENIED, "networks.deny[0]"),
        # A deny in mapped form names its IPv4 addresses in every form, as an IPv4 deny does.
        (MAPPED, "64:ff9b::5db8:d822", False, Reason.NETWORK_DENIED, "networks.deny[0]"),
        (MAPPED, "2002:5db8:d822::1", False, Reason.NETWORK_DENIED, "networks.deny[0]"),
        (MAPPED, "64:ff9b::5db8:d922", True, None, "networks"),
        (MAPPED, "93.184.217.1", True, None, "networks"),
        (MAPPED, "2606:4700::1", False, Reason.NETWORK_DENIED, "networks.deny[1]"),
        (MAPPED, "169.254.169.254", False, Reason.METADATA_ADDRESS, "networks.metadata"),
        # `::/0` names IPv6 space, not every IPv4 address through the mapped block.
        (IPV6_DENIED, "93.184.216.34", True, None, "networks"),
        (IPV6_DENIED, "::ffff:93.184.216.34", False, Reason.NETWORK_DENIED, "networks.deny[0]"),
    ],
    ids=lambda v: v.name if hasattr(v, "sha256") else str(v),
)
def test_mapped_networks_apply_to_ipv4(
    policy: Policy, address: str, allowed: bool, reason: Reason | None, rule: str
) -> None:
    decision = decide_address(policy, ipaddress.ip_address(address), 443)
    assert (decision.allowed, decision.reason, decision.rule) == (allowed, reason, rule)


def test_mapped_network_allows_an_ipv4_literal() -> None:
    decision, _ = decide_url(MAPPED, "http://10.20.0.7/")
    assert (decision.allowed, decision.rule) == (True, "networks.allow[0]")
    decision, _ = decide_url(MAPPED, "http://10.21.0.7/")
    assert decision.reason is Reason.IP_LITERAL_NOT_ALLOWED


def test_decide_answer_one_bad_answer_refuses_the_name() -> None:
    _, target = decide_url(ALLOWLIST, "https://docs.python.org/")
    assert target is not None
    answer = [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("10.0.0.5")]
    decision = decide_answer(ALLOWLIST, target.port, answer)
    assert (decision.allowed, decision.reason, decision.rule) == (
        False,
        Reason.PRIVATE_ADDRESS,
        "networks.block_private",
    )
    assert "10.0.0.5" in (decision.detail or "")


REPORT = make_policy(mode=Mode.REPORT, allow=["ok.example"], deny=["bad.example"])


@pytest.mark.parametrize(
    ("url", "reason", "rule"),
    [
        ("https://bad.example/", Reason.DOMAIN_DENIED, "domains.deny[0]"),
        ("https://other.example/", Reason.DOMAIN_NOT_ALLOWED, "default"),
        ("ftp://ok.example/", Reason.SCHEME_NOT_ALLOWED, "schemes"),
        ("https://ok.example:9/", Reason.PORT_NOT_ALLOWED, "ports"),
    ],
    ids=["domain denied", "default", "scheme", "port"],
)
def test_report_mode_relaxes_url_rules(url, reason, rule) -> None:
    decision, _ = decide_url(REPORT, url)
    assert decision.allowed and not decision.enforced
    assert (decision.reason, decision.rule, decision.verdict) == (reason, rule, "deny")


def test_report_mode_still_enforces_invalid_url_and_addresses() -> None:
    decision, _ = decide_url(REPORT, "not a url")
    assert not decision.allowed and decision.enforced and decision.reason is Reason.INVALID_URL
    address = decide_address(REPORT, ipaddress.ip_address("10.0.0.1"), 443)
    assert not address.allowed and address.enforced and address.reason is Reason.PRIVATE_ADDRESS


def test_report_mode_still_enforces_tool_enablement() -> None:
    policy = make_policy(
        mode=Mode.REPORT,
        tools=MappingProxyType({"WebFetch": ToolSettings(False), "WebSearch": ToolSettings(True)}),
    )
    decision, _ = decide_url(policy, "https://x.example/")
    assert (decision.allowed, decision.reason, decision.rule) == (
        False,
        Reason.TOOL_DISABLED,
        "tools.WebFetch.enabled",
    )


TOOLS = MappingProxyType(
    {
        "WebFetch": ToolSettings(True),
        "WebSearch": ToolSettings(False, ResultsHandling.DROP),
        "XSearch": ToolSettings(False),
    }
)


@pytest.mark.parametrize(
    ("tool", "allowed", "rule"),
    [
        ("WebFetch", True, "tools.WebFetch.enabled"),
        ("WebSearch", False, "tools.WebSearch.enabled"),
        ("XSearch", False, "tools.XSearch.enabled"),
        ("Research", False, "tools.WebSearch.enabled"),
        ("Unknown", False, "tools.Unknown.enabled"),
    ],
)
def test_decide_tool(tool, allowed, rule) -> None:
    needs = ("WebSearch", "WebFetch") if tool == "Research" else ()  # what tools/ passes
    decision = decide_tool(make_policy(tools=TOOLS), tool, needs=needs)
    assert (decision.allowed, decision.rule) == (allowed, rule)
    if not allowed:
        assert decision.reason is Reason.TOOL_DISABLED


@pytest.mark.parametrize(
    ("search", "fetch", "rule"),
    [
        (False, True, "tools.WebSearch.enabled"),
        (True, False, "tools.WebFetch.enabled"),
        (False, False, "tools.WebSearch.enabled"),
    ],
)
def test_a_tool_made_of_others_is_refused_by_the_first_one_off(search, fetch, rule) -> None:
    tools = {"WebSearch": ToolSettings(search), "WebFetch": ToolSettings(fetch)}
    policy = make_policy(allow=["example.org"], tools=MappingProxyType(tools))
    needs = ("WebSearch", "WebFetch")  # data the caller passes: the engine knows no tool
    for decision in (
        decide_tool(policy, "Research", needs=needs),
        decide_query(policy, "Research", ["weather"], needs=needs),
        decide_url(policy, "https://example.org/", tool="Research", needs=needs)[0],
        decide_url(policy, "ftp://example.org/", tool="Research", needs=needs)[0],
    ):
        assert not decision.allowed
        assert (decision.reason, decision.rule, decision.detail) == (
            Reason.TOOL_DISABLED,
            rule,
            "Research",
        )


def test_a_tool_made_of_others_is_allowed_when_each_is_on() -> None:
    tools = {"WebSearch": ToolSettings(True), "WebFetch": ToolSettings(True)}
    policy = make_policy(allow=["example.org"], tools=MappingProxyType(tools))
    decision = decide_tool(policy, "Research", needs=("WebSearch", "WebFetch"))
    assert (decision.allowed, decision.rule) == (True, "tools.Research.enabled")
    decision, _ = decide_url(policy, "https://example.org/", tool="Research", needs=("WebFetch",))
    assert decision.allowed


def test_tool_disabled_comes_before_scheme() -> None:
    decision, _ = decide_url(make_policy(tools=TOOLS), "ftp://x/", tool="WebSearch")
    assert decision.reason is Reason.TOOL_DISABLED


def test_method_checked_for_proxy_only() -> None:
    policy = make_policy(default=Action.ALLOW)
    decision, _ = decide_url(policy, "http://x.example/", tool=None, method="POST")
    assert (decision.allowed, decision.reason, decision.rule) == (
        False,
        Reason.METHOD_NOT_ALLOWED,
        "methods",
    )
    decision, _ = decide_url(policy, "http://x.example/", tool=None, method="HEAD")
    assert decision.allowed


ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@pytest.mark.parametrize("method", ALL_METHODS)
@pytest.mark.parametrize("spelling", ["exact", "lower", "title"])
def test_methods_are_case_sensitive_tokens(method: str, spelling: str) -> None:
    """Class: a body on GET. `get` or `Head` is not the allowed GET or HEAD (RFC 9110 9.1):
    only the exact token passes, so what passes is forwarded exactly as allowed."""
    policy = make_policy(default=Action.ALLOW, methods=ALL_METHODS)
    sent = {"exact": method, "lower": method.lower(), "title": method.title()}[spelling]
    decision, _ = decide_url(policy, "http://x.example/", tool=None, method=sent)
    if spelling == "exact":
        assert decision.allowed
        return
    assert (decision.allowed, decision.reason, decision.rule) == (
        False,
        Reason.METHOD_NOT_ALLOWED,
        "methods",
    )
    assert decision.detail == f"{sent} (methods are case-sensitive; {method} is allowed)"


def test_a_method_not_allowed_in_any_case_has_no_case_hint() -> None:
    decision, _ = decide_url(make_policy(default=Action.ALLOW), "http://x/", tool=None, method="put")
    assert not decision.allowed and decision.detail == "put"


@pytest.mark.parametrize(
    ("content_type", "allowed"),
    [
        ("text/html; charset=utf-8", True),
        ("TEXT/PLAIN", True),
        ("application/json", True),
        ("application/ld+json", True),
        ("application/rss+xml", True),
        ("image/png", False),
        ("application/octet-stream", False),
        ("", False),
        (None, False),
    ],
)
def test_decide_content_type(content_type, allowed) -> None:
    decision = decide_content_type(make_policy(), content_type)
    assert decision.allowed is allowed
    assert decision.rule == "limits.content_types"
    assert decision.reason is (None if allowed else Reason.CONTENT_TYPE_NOT_ALLOWED)
