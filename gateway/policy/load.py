"""Policy files -> validated, compiled `Policy`, or every problem with its line and column.

Owns the policy schema (CONTRACT 3: keys, defaults, patterns, rule ids) and its checks; the
YAML hazards are `yamlsource`'s. Errors are raised together as `PolicyValidationError`;
warnings come back with the policy. Pure: reads one file, never the network.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import ipaddress
import os
import re
from collections.abc import Callable, Hashable, Sequence
from pathlib import PurePath
from types import MappingProxyType
from typing import Any, TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode

from gateway.policy import hosts
from gateway.policy.addresses import looks_numeric_host
from gateway.policy.hosts import (
    HostPattern,
    PatternError,
    PatternKind,
    SuffixKind,
    parse_pattern,
    suffix_kind,
)
from gateway.policy.model import (
    DEFAULT_CONTENT_TYPES,
    Action,
    DomainRule,
    Limits,
    Mode,
    NetworkRule,
    Policy,
    ResultsHandling,
    Timeouts,
    ToolSettings,
)
from gateway.policy.yamlissues import Issue, Severity, SourceError, sort_issues
from gateway.policy.yamlsource import compose, read_bounded
from gateway.policy.yamlwalk import (
    Field,
    Section,
    ValueReader,
    Walker,
    boolean_field,
    choice_field,
    integer_field,
    number_field,
    port_list_field,
    section_field,
    string_field,
    suggest,
    text_field,
)

MAX_POLICY_BYTES = 1 << 20
MAX_TIMEOUT = 86_400.0
MAX_NAME_LENGTH = 128
MAX_MESSAGE_LENGTH = 1000
EMBEDDED_SOURCE = "<embedded default>"

SCHEMES = ("https", "http")  # what the fetcher and the forward proxy speak
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_METHOD_REFUSALS = {
    "CONNECT": "CONNECT tunnels are governed by the gateway configuration (proxy.connect_ports)",
    "TRACE": "TRACE is never forwarded: it echoes requests, credentials included",
}
_TOKEN = "a-z0-9!#$%&'+.^_`|~-"  # RFC 9110 token characters, lower case
_CONTENT_TYPE_RE = re.compile(rf"(?:\*/\*|[{_TOKEN}]+/[*{_TOKEN}]+)\Z")

# The fix offered for every pattern that spans a whole suffix, public or private.
_SUFFIX_ADVICE = "name a registrable domain under it instead"
WARNING = Severity.WARNING

PolicyIssue = Issue
"""One problem: file, 1-based line and column, code, message, severity ("error"|"warning")."""


class PolicyValidationError(Exception):
    """A policy that must not be used; `issues` holds every problem found (warnings too),
    sorted by position, and str() is their lines."""

    def __init__(self, issues: Sequence[PolicyIssue]) -> None:
        self.issues = sort_issues(list(issues))
        super().__init__("\n".join(str(i) for i in self.issues))


def load_policy_file(path: str | os.PathLike[str]) -> tuple[Policy, tuple[PolicyIssue, ...]]:
    """Read and validate a policy file; its name defaults to the file name without `.yaml`."""
    try:
        data = read_bounded(path, max_bytes=MAX_POLICY_BYTES)
    except SourceError as exc:
        raise PolicyValidationError(exc.issues) from None
    return load_policy_bytes(data, source=os.fspath(path), default_name=_stem(os.fspath(path)))


def load_default_policy() -> Policy:
    """The embedded default (gateway/policy/default.yaml); its name is its own `name:` key."""
    resource = importlib.resources.files("gateway.policy").joinpath("default.yaml")
    try:
        data = resource.read_bytes()
    except FileNotFoundError:
        # Never fail open: without the packaged file the default denies every URL.
        data = b""
    policy, _ = load_policy_bytes(data, source=EMBEDDED_SOURCE, default_name="default")
    return policy


def load_policy_bytes(
    data: bytes, *, source: str, default_name: str
) -> tuple[Policy, tuple[PolicyIssue, ...]]:
    """Validate one policy document; warnings are returned, errors raised all together."""
    try:
        document = compose(data, source=source, max_bytes=MAX_POLICY_BYTES)
    except SourceError as exc:
        raise PolicyValidationError(exc.issues) from None
    walker = Walker.of(document)
    top = walker.mapping(document.root, _POLICY_FIELDS, path="")
    policy = _compile(walker, top, source=source, default_name=default_name, data=data)
    issues = walker.sorted_issues()
    if policy is None or walker.has_errors:
        raise PolicyValidationError(issues)
    return policy, issues


def _stem(path: str) -> str:
    name = PurePath(path).name
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


# --- readers for policy values -------------------------------------------------------------


def _read_version(w: Walker, node: Node, path: str) -> int | None:
    value = w.integer(node, path)
    if value is not None and value != 1:
        w.error(node, "bad_version", f"version must be 1 (the only policy format), got {value}")
        return None
    return value


def _list_of(read_item: Callable[[Walker, Node, str], Any], **options: Any) -> ValueReader:
    """A list read by `read_item`, each entry once (a repeat is a warning)."""
    return lambda w, node, path: w.unique_items(
        node, path, lambda item, where: read_item(w, item, where), duplicates=WARNING, **options
    )


def _scheme(w: Walker, node: Node, where: str) -> str | None:
    text = w.string(node, where)
    if text is None or text in SCHEMES:
        return text
    if text.lower() in SCHEMES:
        hint = f"; write {text.lower()!r} (lower case)"
    else:
        hint = suggest(text, SCHEMES) or (
            "; the fetcher and the forward proxy speak only https and http"
        )
    w.error(node, "unknown_scheme", f"{where}: unknown scheme {text!r}{hint}")
    return None


def _method(w: Walker, node: Node, where: str) -> str | None:
    text = w.string(node, where)
    if text is None or text in METHODS:
        return text
    upper = text.upper()
    if upper in _METHOD_REFUSALS:
        hint = f"; {_METHOD_REFUSALS[upper]}"
    elif upper in METHODS:
        hint = f"; write {upper!r} (methods are upper case)"
    else:
        hint = suggest(text, METHODS) or f" (known: {', '.join(METHODS)})"
    w.error(node, "unknown_method", f"{where}: unknown method {text!r}{hint}")
    return None


def _content_type(w: Walker, node: Node, where: str) -> str | None:
    text = w.string(node, where)
    if text is None:
        return None
    media = text.lower()
    if not _CONTENT_TYPE_RE.match(media):
        w.error(
            node,
            "bad_content_type",
            f"{where}: {text!r} is not a media type pattern; write type/subtype "
            "(e.g. 'text/html', 'text/*', 'application/*+json'), without parameters",
        )
        return None
    return media


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


def _domain_rules(which: str) -> Field:
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


def _network_rules() -> Field:
    return _rule_list(
        _network_rule,
        lambda rule: rule.network,
        lambda rule, earlier: f"{rule.network} repeats {earlier}",
    )


def _network_rule(w: Walker, node: Node, rule_id: str) -> NetworkRule | None:
    network = _network(w, node, rule_id)
    return None if network is None else NetworkRule(network, rule_id)


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


def _tool_fields(*, enabled: bool, has_results: bool) -> dict[str, Field]:
    fields = {"enabled": boolean_field(enabled)}
    if has_results:
        fields["results"] = choice_field("drop", tuple(r.value for r in ResultsHandling))
    return fields


_TOOL_FIELDS = {
    "WebFetch": section_field(_tool_fields(enabled=True, has_results=False)),
    "WebSearch": section_field(_tool_fields(enabled=True, has_results=True)),
    "XSearch": section_field(_tool_fields(enabled=False, has_results=True)),
}


def _unknown_tool_hint(name: str) -> str:
    if name.lower() == "research":
        return "; Research is enabled exactly when WebSearch and WebFetch are"
    return suggest(name, tuple(_TOOL_FIELDS)) or f" (tools: {', '.join(_TOOL_FIELDS)})"


def _read_tools(w: Walker, node: Node | None, path: str) -> Section:
    return w.mapping(
        node,
        _TOOL_FIELDS,
        path=path,
        unknown_code="unknown_tool",
        unknown_noun="tool",
        unknown_hint=_unknown_tool_hint,
    )


_LIMITS = Limits()
_TIMEOUTS = Timeouts()

_POLICY_FIELDS: dict[str, Field] = {
    "version": Field(_read_version, 1),
    "name": text_field(None, max_length=MAX_NAME_LENGTH),
    "mode": choice_field(Mode.ENFORCE.value, tuple(m.value for m in Mode)),
    "default": choice_field(Action.DENY.value, tuple(a.value for a in Action)),
    "schemes": Field(_list_of(_scheme), SCHEMES),
    "ports": port_list_field((443, 80), duplicates=WARNING),
    "methods": Field(_list_of(_method), ("GET", "HEAD")),
    "domains": section_field({"allow": _domain_rules("allow"), "deny": _domain_rules("deny")}),
    "networks": section_field(
        {
            "block_private": boolean_field(True),
            "allow": _network_rules(),
            "deny": _network_rules(),
        }
    ),
    "redirects": section_field(
        {
            "max": integer_field(5, minimum=0, maximum=20),
            "allow_downgrade": boolean_field(False),
        }
    ),
    "timeouts": section_field(
        {
            name: number_field(getattr(_TIMEOUTS, name), positive=True, maximum=MAX_TIMEOUT)
            for name in ("connect", "read", "total")
        }
    ),
    "limits": section_field(
        {
            "max_response_bytes": integer_field(_LIMITS.max_response_bytes, minimum=0),
            "default_max_chars": integer_field(_LIMITS.default_max_chars, minimum=0),
            "max_chars": integer_field(_LIMITS.max_chars, minimum=0),
            "content_types": Field(
                _list_of(_content_type, shown=lambda _, node: repr(node.value)),
                DEFAULT_CONTENT_TYPES,
            ),
        }
    ),
    "tools": Field(_read_tools, None, read_absent=True),
}


# --- compiling -----------------------------------------------------------------------------


def _compile(
    w: Walker, top: Section, *, source: str, default_name: str, data: bytes
) -> Policy | None:
    domains, networks = top["domains"], top["networks"]
    timeouts, limits = top["timeouts"], top["limits"]
    _check_cross_lists(w, domains, networks)
    if timeouts.valid("connect", "total") and timeouts["total"] < timeouts["connect"]:
        w.error(
            timeouts.nodes["total"] if "total" in timeouts.nodes else timeouts.nodes.get("connect"),
            "inconsistent_values",
            f"timeouts.total ({timeouts['total']:g}) is less than timeouts.connect "
            f"({timeouts['connect']:g}); total bounds the whole request, connect included",
        )
    if (
        limits.valid("default_max_chars", "max_chars")
        and limits["default_max_chars"] > limits["max_chars"]
    ):
        w.error(
            limits.nodes.get("default_max_chars") or limits.nodes.get("max_chars"),
            "inconsistent_values",
            f"limits.default_max_chars ({limits['default_max_chars']}) is more than "
            f"limits.max_chars ({limits['max_chars']})",
        )
    if w.has_errors:
        return None
    tools = top["tools"]
    settings = {
        name: ToolSettings(
            tools[name]["enabled"], ResultsHandling(tools[name].values.get("results", "drop"))
        )
        for name in _TOOL_FIELDS
    }
    return Policy(
        name=top["name"] or default_name,
        sha256=hashlib.sha256(data).hexdigest(),
        source=source,
        version=top["version"],
        mode=Mode(top["mode"]),
        default=Action(top["default"]),
        schemes=tuple(top["schemes"]),
        ports=tuple(top["ports"]),
        methods=tuple(top["methods"]),
        domain_allow=tuple(rule for rule, _ in domains["allow"]),
        domain_deny=tuple(rule for rule, _ in domains["deny"]),
        block_private=networks["block_private"],
        network_allow=tuple(rule for rule, _ in networks["allow"]),
        network_deny=tuple(rule for rule, _ in networks["deny"]),
        max_redirects=top["redirects"]["max"],
        allow_downgrade=top["redirects"]["allow_downgrade"],
        timeouts=Timeouts(timeouts["connect"], timeouts["read"], timeouts["total"]),
        limits=Limits(
            limits["max_response_bytes"],
            limits["default_max_chars"],
            limits["max_chars"],
            tuple(limits["content_types"]),
        ),
        tools=MappingProxyType(settings),
    )


def _check_cross_lists(w: Walker, domains: Section, networks: Section) -> None:
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
                if rule.network.version == deny.network.version and rule.network.subnet_of(
                    deny.network
                ):
                    w.warning(
                        node,
                        "conflicting_rule",
                        f"{rule.rule_id} {rule.network} never applies: {deny.rule_id} "
                        f"{deny.network} denies it (deny wins)",
                    )
                    break


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
