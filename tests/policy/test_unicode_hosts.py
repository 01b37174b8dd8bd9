"""Decide what you dial: a Unicode spelling of an address is decided as the address it maps to.

Every code point whose UTS 46 mapping holds a digit, a dot or a colon is put in every position
of a set of address spellings, both in place of what it maps to and inserted between
characters; the decision for that Unicode URL must equal the decision for its mapped form
(verdict, reason, rule, and the host, port and address a connection would use), under an
allow-all policy and an allowlist policy. Exhaustive, not sampled: the set is small.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

import idna
import pytest

from gateway.policy.engine import decide_answer, decide_url
from gateway.policy.model import Action, Policy
from tests.policy.conftest import make_policy

ADDRESSES = (
    "127.0.0.1",
    "169.254.169.254",
    "10.0.0.1",
    "0x7f.1",
    "2130706433",
    "017700000001",
    "8.8.8.8",
    "127.0.0.1:8080",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[fd00:ec2::254]",
)

POLICIES = {
    "allow-all": make_policy(default=Action.ALLOW, ports=(80, 443, 8080)),
    "allowlist": make_policy(
        allow=["example.com", ".example.org"], net_allow=["10.0.0.0/8"], ports=(80, 443, 8080)
    ),
}

_INTERESTING = re.compile(r"[0-9.:]")


@functools.cache
def mapped_code_points() -> tuple[tuple[str, str], ...]:
    """(code point, its UTS 46 mapping) for every non-ASCII code point whose mapping (as the
    idna package applies it) contains a digit, a dot or a colon."""
    found = []
    for cp in range(0x80, 0x110000):
        ch = chr(cp)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        try:
            mapped = idna.uts46_remap(ch, std3_rules=False)
        except (idna.IDNAError, UnicodeError):
            continue
        if mapped != ch and _INTERESTING.search(mapped):
            found.append((ch, mapped))
    return tuple(found)


def spellings(address: str) -> Iterator[tuple[str, str]]:
    """(Unicode host, its mapped form) for each code point in every position of `address`."""
    for ch, mapped in mapped_code_points():
        for i in range(len(address) + 1):
            yield address[:i] + ch + address[i:], address[:i] + mapped + address[i:]
            if address.startswith(mapped, i):
                yield address[:i] + ch + address[i + len(mapped) :], address


def outcome(policy: Policy, host: str) -> tuple[object, ...]:
    """Everything the gateway would do with http://host/: the URL decision, and for an
    allowed IP literal the address decision, with what a connection would use."""
    decision, target = decide_url(policy, f"http://{host}/path")
    if target is None:
        return (decision.allowed, decision.reason, decision.rule)
    dialled = (target.host, target.port, target.ip, target.url.raw_host, target.url.port)
    if decision.allowed and target.ip is not None:
        decision = decide_answer(policy, target.port, [target.ip])
    return (decision.allowed, decision.reason, decision.rule, *dialled)


def test_the_code_point_set_is_what_the_issue_names() -> None:
    points = dict(mapped_code_points())
    assert points["\uff11"] == "1"  # fullwidth digit one
    assert points["\u3002"] == "."  # ideographic full stop
    assert points["\u2460"] == "1"  # circled digit one
    assert points["\U0001d7cf"] == "1"  # mathematical bold digit one
    assert points["\uff1a"] == ":"  # fullwidth colon
    assert len(points) > 250


@pytest.mark.parametrize("policy_name", sorted(POLICIES))
@pytest.mark.parametrize("address", ADDRESSES)
def test_unicode_spelling_decides_as_its_mapped_form(policy_name: str, address: str) -> None:
    policy = POLICIES[policy_name]
    mismatches = []
    checked = 0
    for unicode_host, mapped_host in spellings(address):
        checked += 1
        got, want = outcome(policy, unicode_host), outcome(policy, mapped_host)
        if got != want:
            mismatches.append((unicode_host, mapped_host, got, want))
    assert checked > 1000
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize(
    ("host", "reason", "rule"),
    [
        ("\uff11\uff16\uff19.\uff12\uff15\uff14.\uff11\uff16\uff19.\uff12\uff15\uff14", "metadata_address", "networks.metadata"),
        ("\uff11\uff12\uff17.\uff10.\uff10.\uff11", "private_address", "networks.block_private"),
        ("127\u30020\u30020\u30021", "private_address", "networks.block_private"),
        ("\u2460\u2461\u2466.0.0.1", "private_address", "networks.block_private"),
        ("\U0001d7cf\U0001d7d0\U0001d7d5.0.0.1", "private_address", "networks.block_private"),
        ("[\uff1a\uff1a1]", "private_address", "networks.block_private"),
    ],
)
def test_unicode_spellings_of_internal_addresses_are_refused(host: str, reason: str, rule: str) -> None:
    got = outcome(POLICIES["allow-all"], host)
    assert got[:3] == (False, reason, rule)
