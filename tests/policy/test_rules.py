"""Policy rule lists (rules.py): rule ids as 0-based YAML paths, patterns normalised like
hosts, the checks on each entry (over-broad and suffix patterns, CIDRs with host bits, networks
that hold only metadata addresses) and across the lists (an allow that a deny makes dead, a
rule listed twice). Read through the policy loader, which is how rules are ever read."""

from __future__ import annotations

import pytest

from gateway.policy.engine import Reason, decide_url
from gateway.policy.hosts import PatternKind
from gateway.policy.load import PolicyIssue, PolicyValidationError, load_policy_bytes


def _load(text: str) -> tuple:  # type: ignore[type-arg]
    return load_policy_bytes(text.encode(), source="t.yaml", default_name="t")


def _codes(text: str) -> list[tuple[str, str]]:
    """(code, message) of every issue, whether the policy loaded or not."""
    try:
        _, issues = _load(text)
    except PolicyValidationError as exc:
        issues = exc.issues
    return [(issue.label, issue.message) for issue in issues]


def test_rule_ids_are_zero_based_yaml_paths() -> None:
    policy, _ = _load(
        "domains:\n"
        "  allow: [docs.python.org, '*.example.org', .example.net]\n"
        "  deny: [a.example.org, {host: .pastebin.com, message: paste sites are closed}]\n"
        "networks: {allow: [10.20.0.0/16], deny: [10.0.0.0/8, 192.168.0.0/16]}\n"
    )
    assert [(r.rule_id, r.pattern.kind, r.pattern.domain) for r in policy.domain_allow] == [
        ("domains.allow[0]", PatternKind.EXACT, "docs.python.org"),
        ("domains.allow[1]", PatternKind.SUBDOMAINS, "example.org"),
        ("domains.allow[2]", PatternKind.DOMAIN_AND_SUBDOMAINS, "example.net"),
    ]
    assert [(r.rule_id, r.message) for r in policy.domain_deny] == [
        ("domains.deny[0]", None),
        ("domains.deny[1]", "paste sites are closed"),
    ]
    assert [r.rule_id for r in policy.network_deny] == ["networks.deny[0]", "networks.deny[1]"]
    decision, _ = decide_url(policy, "https://pastebin.com/raw/x")
    assert (decision.reason, decision.rule, decision.message) == (
        Reason.DOMAIN_DENIED,
        "domains.deny[1]",
        "paste sites are closed",
    )


def test_suffix_shortcut_never_hides_a_suffix() -> None:
    """Every rule of the bundled list (a wildcard rule with a label in front) still reaches the
    authoritative `suffix_kind`, Unicode suffixes in their A-label form included."""
    from gateway.policy.hosts import HostError, _suffix_extractor, normalize_name, suffix_kind
    from gateway.policy.rules import _may_be_suffix

    missed = []
    for rule in _suffix_extractor().tlds:  # type: ignore[attr-defined]
        text = "x" + rule[1:] if rule.startswith("*.") else rule.lstrip("!")
        try:
            domain = normalize_name(text)
        except HostError:
            continue
        if suffix_kind(domain) is not None and not _may_be_suffix(domain):
            missed.append(domain)
    assert missed == []


@pytest.mark.parametrize(
    ("pattern", "code"),
    [
        (".公司.cn", "pattern_too_broad"),
        ("*.рф", "pattern_too_broad"),
        (".xn--p1ai", "pattern_too_broad"),
        ("*.s3.amazonaws.com", "pattern_broad"),
        ("*.xn--p1ai.example", None),
    ],
)
def test_internationalised_suffixes_are_checked(pattern: str, code: str | None) -> None:
    text = f"domains: {{allow: ['{pattern}']}}\n"
    try:
        _, issues = _load(text)
    except PolicyValidationError as exc:
        issues = exc.issues
    assert [i.code for i in issues] == ([code] if code else [])


def test_patterns_are_normalised_like_hosts() -> None:
    policy, _ = _load("domains: {allow: [Docs.Python.ORG., bücher.example]}\n")
    assert [r.pattern.domain for r in policy.domain_allow] == [
        "docs.python.org",
        "xn--bcher-kva.example",
    ]


def test_a_cidr_with_host_bits_names_the_network_meant() -> None:
    assert _codes("networks: {allow: [10.0.0.1/8]}\n") == [
        ("bad_cidr", "networks.allow[0]: '10.0.0.1/8' has host bits set; did you mean 10.0.0.0/8?")
    ]


def test_an_allow_that_a_deny_covers_never_applies() -> None:
    text = "domains: {allow: [api.example.com], deny: [.example.com]}\n"
    ((label, message),) = _codes(text)
    assert label == "warning[conflicting_rule]"
    assert message.startswith("domains.allow[0] 'api.example.com' never applies: domains.deny[0]")
    networks = "networks: {allow: [10.20.0.0/16], deny: [10.0.0.0/8]}\n"
    assert [label for label, _ in _codes(networks)] == ["warning[conflicting_rule]"]


def test_a_deny_inside_an_allow_is_no_conflict() -> None:
    assert _codes("networks: {allow: [10.0.0.0/8], deny: [10.20.0.0/16]}\n") == []


def test_a_network_of_metadata_addresses_only_is_ineffective() -> None:
    ((label, message),) = _codes("networks: {allow: [169.254.169.254/32]}\n")
    assert label == "warning[ineffective_rule]"
    assert "refused whatever networks.allow says" in message


def test_a_rule_listed_twice_is_a_warning_naming_the_first() -> None:
    ((label, message),) = _codes("networks: {deny: [172.16.0.0/12, 172.16.0.0/12]}\n")
    assert label == "warning[duplicate_rule]"
    assert message == "networks.deny[1]: 172.16.0.0/12 repeats networks.deny[0]"


def test_issues_are_policy_issues() -> None:
    _, issues = _load("networks: {deny: [10.0.0.0/8, 10.0.0.0/8]}\n")
    assert all(isinstance(issue, PolicyIssue) for issue in issues)
