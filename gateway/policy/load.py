"""Policy files -> validated, compiled `Policy`, or every problem with its line and column.

Owns the policy schema (keys, defaults, rule ids: docs/policy-reference.md) and its checks;
the domain and network rule lists are `rules.py`'s, the YAML hazards `gateway.yamlstrict`'s. Errors
are raised together as `PolicyValidationError`; warnings come back with the policy. Pure:
reads one file, never the network.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import re
from collections.abc import Callable, Sequence
from pathlib import PurePath
from types import MappingProxyType
from typing import Any

from yaml.nodes import Node

from gateway.policy.dlpload import compile_dlp, dlp_field
from gateway.policy.model import (
    DEFAULT_CONTENT_TYPES,
    Action,
    Limits,
    Mode,
    Policy,
    ProxyLimits,
    ResultsHandling,
    Timeouts,
    ToolSettings,
)
from gateway.policy.rules import (
    check_cross_lists,
    domain_rules,
    network_rules,
)
from gateway.yamlstrict.issues import Issue, Severity, SourceError, sort_issues
from gateway.yamlstrict.source import compose, read_bounded
from gateway.yamlstrict.walk import (
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
    suggest,
    text_field,
)

MAX_POLICY_BYTES = 1 << 20
MAX_TIMEOUT = 86_400.0
MAX_NAME_LENGTH = 128
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
    "domains": section_field({"allow": domain_rules("allow"), "deny": domain_rules("deny")}),
    "networks": section_field(
        {
            "block_private": boolean_field(True),
            "allow": network_rules(),
            "deny": network_rules(),
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
            # 0 would refuse every non-empty body, or return no text at all: never meant.
            "max_response_bytes": integer_field(_LIMITS.max_response_bytes, minimum=1),
            "default_max_chars": integer_field(_LIMITS.default_max_chars, minimum=1),
            "max_chars": integer_field(_LIMITS.max_chars, minimum=1),
            "content_types": Field(
                _list_of(_content_type, shown=lambda _, node: repr(node.value)),
                DEFAULT_CONTENT_TYPES,
            ),
        }
    ),
    "proxy_limits": section_field(
        {
            "max_response_bytes": integer_field(None, minimum=1),
            "content_types": Field(
                _list_of(_content_type, shown=lambda _, node: repr(node.value)), None
            ),
        }
    ),
    "tools": Field(_read_tools, None, read_absent=True),
    "dlp": dlp_field(),
}


# --- compiling -----------------------------------------------------------------------------


def _compile(
    w: Walker, top: Section, *, source: str, default_name: str, data: bytes
) -> Policy | None:
    domains, networks = top["domains"], top["networks"]
    timeouts, limits, proxy_limits = top["timeouts"], top["limits"], top["proxy_limits"]
    check_cross_lists(w, domains, networks)
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
    dlp = compile_dlp(w, top["dlp"], source=source)
    if w.has_errors or dlp is None:
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
        proxy_limits=ProxyLimits(
            proxy_limits["max_response_bytes"],
            None if proxy_limits["content_types"] is None else tuple(proxy_limits["content_types"]),
        ),
        tools=MappingProxyType(settings),
        dlp=dlp,
    )
