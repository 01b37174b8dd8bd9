"""Policy rule lists: domain patterns and CIDRs as written -> rules with their 0-based ids,
the checks on each pattern (over-broad, malformed, IP addresses) and across the allow and deny
lists (rules a deny makes dead). Pure; part of the policy loader (load.py).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode

from gateway.policy import hosts
from gateway.policy.addresses import (
    embedded_ipv4_interval,
    looks_numeric_host,
    mapped_ipv4_network,
    metadata_range_holding,
)
from gateway.policy.hosts import (
    HostPattern,
    PatternError,
    PatternKind,
    SuffixKind,
    parse_pattern,
    suffix_kind,
)
from gateway.policy.model import (
    DomainRule,
    IPNetwork,
    NetworkRule,
)
from gateway.yamlstrict.issues import Severity
from gateway.yamlstrict.walk import (
    Field,
    Section,
    Walker,
    string_field,
    text_field,
)

MAX_MESSAGE_LENGTH = 1000
_SUFFIX_ADVICE = "name a registrable domain under it instead"
WARNING = Severity.WARNING

_ENTRY_FIELDS = {
    "host": string_field(required=True),
    "message": text_field(None, max_length=MAX_MESSAGE_LENGTH, printable=False),
}

Rule = TypeVar("Rule", DomainRule, NetworkRule)


def _rule_list(
    read_rule: Callable[[Walker, Node, str], Rule | None],
    key: Callable[[Rule], Hashable],
    repeats: Callable[[Rule, str], str],
) -> Field:
    """Rules with their nodes; a rule that repeats an earlier one (the same `key`) is a
    `duplicate_rule` warning, worded by `repeats(rule, earlier rule id)`, and kept."""

    def read(w: Walker, node: Node, path: str) -> list[tuple[Rule, Node]] | None:
        items = w.sequence(node, path)
        if items is None:
            return None
        rules: list[tuple[Rule, Node]] = []
        first_at: dict[Hashable, str] = {}
        ok = True
        for i, item in enumerate(items):
            rule_id = f"{path}[{i}]"
            rule = read_rule(w, item, rule_id)
            if rule is None:
                ok = False
                continue
            earlier = first_at.setdefault(key(rule), rule_id)
            if earlier != rule_id:
                w.warning(item, "duplicate_rule", f"{rule_id}: {repeats(rule, earlier)}")
            rules.append((rule, item))
        return rules if ok else None

    return Field(read, [])


def domain_rules(which: str) -> Field:
    return _rule_list(
        lambda w, item, rule_id: _domain_rule(w, item, rule_id, is_allow=which == "allow"),
        lambda rule: (rule.pattern.kind, rule.pattern.domain),
        lambda rule, earlier: f"{rule.pattern.text!r} repeats {earlier}; remove one",
    )


def _domain_rule(w: Walker, item: Node, rule_id: str, *, is_allow: bool) -> DomainRule | None:
    message = None
    host_node = item
    if isinstance(item, MappingNode):
        entry = w.mapping(item, _ENTRY_FIELDS, path=rule_id)
        if not entry.valid("host", "message"):
            return None
        text, message, host_node = entry["host"], entry["message"], entry.nodes["host"]
    elif isinstance(item, ScalarNode):
        text = w.string(item, rule_id)
        if text is None:
            return None
    else:
        w.wrong_type(item, rule_id, "a host pattern or {host, message}")
        return None
    pattern = _pattern(w, host_node, rule_id, text, is_allow=is_allow)
    return None if pattern is None else DomainRule(pattern, rule_id, message)


def _pattern(
    w: Walker, node: Node, rule_id: str, text: str, *, is_allow: bool
) -> HostPattern | None:
    bare = text.removeprefix("*.").removeprefix(".")
    if _is_address(bare):
        w.error(
            node,
            "bad_pattern",
            f"{rule_id}: {text!r} is an IP address, which never matches a domain pattern; "
            "list it as a CIDR under networks.allow or networks.deny",
        )
        return None
    try:
        pattern = parse_pattern(text)
    except PatternError as exc:
        w.error(node, exc.code, f"{rule_id}: {exc.message}")
        return None
    if is_allow:
        kind = suffix_kind(pattern.domain) if _may_be_suffix(pattern.domain) else None
        if kind is SuffixKind.PUBLIC:
            w.error(
                node,
                "pattern_too_broad",
                f"{rule_id}: {text!r} allows a whole public suffix ({pattern.domain}); "
                f"{_SUFFIX_ADVICE}",
            )
            return None
        if kind is SuffixKind.PRIVATE and pattern.kind is not PatternKind.EXACT:
            w.warning(
                node,
                "pattern_broad",
                f"{rule_id}: {text!r} allows every site under the shared suffix "
                f"{pattern.domain} (anyone can register one); {_SUFFIX_ADVICE}",
            )
    return pattern


@functools.cache
def _suffix_rules() -> frozenset[str]:
    return frozenset(hosts._suffix_extractor().tlds)  # type: ignore[attr-defined]


def _may_be_suffix(domain: str) -> bool:
    """A set lookup that rules out most domains before the (slower) authoritative
    `suffix_kind`: a suffix is a listed rule or sits under a wildcard rule (`*.ck`)."""
    if "xn--" in domain:
        return True  # the list spells internationalised suffixes in Unicode: no shortcut
    rules = _suffix_rules()
    parent = domain.partition(".")[2]
    return domain in rules or (bool(parent) and f"*.{parent}" in rules)


def _is_address(host: str) -> bool:
    last_label = host.rstrip(".").rsplit(".", 1)[-1]
    if not (last_label[:1].isdigit() or ":" in host):
        return False  # a name's last label starts with a letter; every IPv4 form, a digit
    candidate = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(candidate)
    except ValueError:
        return looks_numeric_host(candidate.rstrip("."))
    return True


def network_rules() -> Field:
    return _rule_list(
        _network_rule,
        lambda rule: rule.network,
        lambda rule, earlier: f"{rule.network} repeats {earlier}",
    )


def _network_rule(w: Walker, node: Node, rule_id: str) -> NetworkRule | None:
    network = _network(w, node, rule_id)
    if network is None:
        return None
    if rule_id.startswith("networks.allow["):
        _warn_metadata_only(w, node, rule_id, network)
    return NetworkRule(network, rule_id)


def _warn_metadata_only(w: Walker, node: Node, rule_id: str, network: IPNetwork) -> None:
    """A `networks.allow` entry that names only cloud metadata addresses never applies: they
    are refused whatever `networks.allow` says. A warning, like a dead rule; checked entry by
    entry, so a bad entry elsewhere in the list does not hide it."""
    row = metadata_range_holding(network)
    if row is not None:
        w.warning(
            node,
            "ineffective_rule",
            f"{rule_id} {network} never applies: every address in it is in "
            f"{row.network}, a {row.label}; those are refused whatever networks.allow says",
        )


def _network(w: Walker, node: Node, rule_id: str) -> Any:
    text = w.string(node, rule_id)
    if text is None:
        return None
    family = ipaddress.IPv6Network if ":" in text else ipaddress.IPv4Network
    try:
        return family(text, strict=True)
    except ValueError as exc:
        try:
            fixed = family(text, strict=False)
        except ValueError:
            w.error(node, "bad_cidr", f"{rule_id}: {text!r} is not a CIDR: {exc}")
            return None
        w.error(node, "bad_cidr", f"{rule_id}: {text!r} has host bits set; did you mean {fixed}?")
        return None


def check_cross_lists(w: Walker, domains: Section, networks: Section) -> None:
    """Allow rules that a deny rule makes dead: a warning, since deny wins anyway."""
    if domains.valid("allow", "deny") and domains["deny"]:
        by_domain: dict[str, list[DomainRule]] = {}
        for rule, _ in domains["deny"]:
            by_domain.setdefault(rule.pattern.domain, []).append(rule)
        for rule, node in domains["allow"]:
            deny = _covering_deny(rule.pattern, by_domain)
            if deny is not None:
                w.warning(
                    node,
                    "conflicting_rule",
                    f"{rule.rule_id} {rule.pattern.text!r} never applies: {deny.rule_id} "
                    f"{deny.pattern.text!r} denies it (deny wins)",
                )
    if networks.valid("allow", "deny"):
        for rule, node in networks["allow"]:
            for deny, _ in networks["deny"]:
                if _deny_covers(deny.network, rule.network):
                    w.warning(
                        node,
                        "conflicting_rule",
                        f"{rule.rule_id} {rule.network} never applies: {deny.rule_id} "
                        f"{deny.network} denies it (deny wins)",
                    )
                    break


def _deny_covers(deny: IPNetwork, allow: IPNetwork) -> bool:
    """Whether the deny CIDR matches every address the allow CIDR matches, as the engine
    compares them: an IPv4 CIDR, or a deny CIDR in IPv4-mapped form, also matches every IPv6
    form of its addresses (mapped, NAT64, 6to4, ...); a mapped allow CIDR also the IPv4
    addresses it maps."""
    deny_ipv4 = deny if deny.version == 4 else mapped_ipv4_network(deny)
    if allow.version == 4:
        return deny_ipv4 is not None and allow.subnet_of(deny_ipv4)
    if deny.version == 6 and allow.subnet_of(deny):
        # A mapped allow names IPv4 addresses too, which only a deny naming IPv4 matches.
        return mapped_ipv4_network(allow) is None or deny_ipv4 is not None
    carried = embedded_ipv4_interval(allow) if deny_ipv4 is not None else None
    if carried is None or deny_ipv4 is None or int(allow.network_address) <= 1:
        return False  # (:: and ::1 sit in ::/96 but carry no IPv4 address)
    low, high = carried
    return int(deny_ipv4.network_address) <= low and high <= int(deny_ipv4.broadcast_address)


def _covering_deny(
    allow: HostPattern, deny_by_domain: dict[str, list[DomainRule]]
) -> DomainRule | None:
    """The first deny rule that matches every host the allow pattern matches, if any."""
    covers_itself = allow.kind is not PatternKind.SUBDOMAINS
    covers_below = allow.kind is not PatternKind.EXACT
    labels = allow.domain.split(".")
    best: DomainRule | None = None
    for depth in range(len(labels)):
        domain = ".".join(labels[depth:])
        for deny in deny_by_domain.get(domain, ()):
            if deny.pattern.kind is PatternKind.EXACT:
                ok = depth == 0 and not covers_below
            elif deny.pattern.kind is PatternKind.SUBDOMAINS:
                ok = depth > 0 or not covers_itself
            else:
                ok = True
            if ok and (best is None or _index(deny) < _index(best)):
                best = deny
    return best


def _index(rule: DomainRule) -> int:
    return int(rule.rule_id.rsplit("[", 1)[1].rstrip("]"))
