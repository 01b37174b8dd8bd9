"""decide(): every request the gateway serves is judged here, purely, in the documented order.

The order (docs/policy-reference.md, Decisions), first match wins:

1. parse the URL                                   invalid_url            rule `url`
2. the tool is enabled                             tool_disabled          `tools.<Tool>.enabled`
   the scheme                                      scheme_not_allowed     `schemes`
   the port                                        port_not_allowed       `ports`
   (a CONNECT: first the gateway configuration's  port_not_allowed       `proxy.connect_ports`
   connect ports, which the caller passes in)
   for proxied plain HTTP, the method              method_not_allowed     `methods`
2b. outbound data (dlp.py): the URL as sent,       sensitive_data         `dlp.<detector>`
   a search query, a proxied request's headers
   and body prefix; never a redirect target or a search result's URL
3. a name: `domains.deny`                          domain_denied          `domains.deny[i]`
           then `domains.allow`                                           `domains.allow[i]`
           then `default`                          domain_not_allowed     `default`
   an IP literal: a `networks.allow` CIDR                                 `networks.allow[i]`
                  or `default: allow` when public                         `default`
                  else                             ip_literal_not_allowed `default`
                  (under `default: allow` a blocked address reports its address reason)
4. after resolving, for every address: metadata    metadata_address       `networks.metadata`
   the gateway's own listening address             own_address            `networks.own_address`
   `networks.deny`                                 network_denied         `networks.deny[i]`
   `networks.allow` (exempt from block_private)
   `block_private`                                 private_address        `networks.block_private`
5. redirects (redirects.py): the cap               redirect_limit      `redirects.max`
   the downgrade rule                              redirect_downgrade  `redirects.allow_downgrade`
   after the response head, the content type       content_type_not_allowed
                                                                       `limits.content_types`
   (a proxied plain-HTTP response: `proxy_limits.content_types`, when the policy sets it)

Report mode relaxes steps 2 (scheme, port, method) and 3, and the content type: the decision
is `allowed` with `enforced: False` and keeps the reason and rule that would have denied.
`invalid_url`, tool enablement, every address check and the redirect rules always hold.
A DLP finding is enforced only when both `mode` and `dlp.mode` say enforce; otherwise the
decision goes on to step 3 and carries the finding (`Decision.dlp`) for the audit record.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gateway.policy.addresses import (
    AddressKind,
    IPAddress,
    classify_address,
    embedded_ipv4,
    mapped_ipv4_network,
)
from gateway.policy.dlp import UNTRUSTED_HOST, DlpMode, Finding, split_url
from gateway.policy.model import Action, IPNetwork, Mode, Policy
from gateway.policy.urls import InvalidURLError, Target, UnsupportedSchemeError, parse_url
from gateway.wire.representable import representable


class Reason(StrEnum):
    INVALID_URL = "invalid_url"
    TOOL_DISABLED = "tool_disabled"
    SCHEME_NOT_ALLOWED = "scheme_not_allowed"
    PORT_NOT_ALLOWED = "port_not_allowed"
    DOMAIN_DENIED = "domain_denied"
    DOMAIN_NOT_ALLOWED = "domain_not_allowed"
    IP_LITERAL_NOT_ALLOWED = "ip_literal_not_allowed"
    METADATA_ADDRESS = "metadata_address"
    OWN_ADDRESS = "own_address"
    NETWORK_DENIED = "network_denied"
    PRIVATE_ADDRESS = "private_address"
    REDIRECT_LIMIT = "redirect_limit"
    REDIRECT_DOWNGRADE = "redirect_downgrade"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    CONTENT_TYPE_NOT_ALLOWED = "content_type_not_allowed"
    NOT_TLS = "not_tls"
    SNI_MISMATCH = "sni_mismatch"
    SENSITIVE_DATA = "sensitive_data"


# Reasons that report mode lets through (recorded with enforced: False).
RELAXED_IN_REPORT_MODE = frozenset(
    {
        Reason.SCHEME_NOT_ALLOWED,
        Reason.PORT_NOT_ALLOWED,
        Reason.METHOD_NOT_ALLOWED,
        Reason.DOMAIN_DENIED,
        Reason.DOMAIN_NOT_ALLOWED,
        Reason.IP_LITERAL_NOT_ALLOWED,
        Reason.CONTENT_TYPE_NOT_ALLOWED,
    }
)

# Rules that live in the gateway configuration, not the policy; a refusal names it as such.
CONNECT_PORTS_RULE = "proxy.connect_ports"
REQUIRE_TLS_RULE = "proxy.require_tls"
CONFIG_RULES = frozenset({CONNECT_PORTS_RULE, REQUIRE_TLS_RULE})

_DESCRIPTIONS = {
    Reason.INVALID_URL: "the URL is not valid",
    Reason.TOOL_DISABLED: "the tool is disabled",
    Reason.SCHEME_NOT_ALLOWED: "scheme not allowed",
    Reason.PORT_NOT_ALLOWED: "port not allowed",
    Reason.DOMAIN_DENIED: "domain denied",
    Reason.DOMAIN_NOT_ALLOWED: "domain not allowed",
    Reason.IP_LITERAL_NOT_ALLOWED: "IP address URLs are not allowed",
    Reason.METADATA_ADDRESS: "cloud metadata address",
    Reason.OWN_ADDRESS: "the gateway's own address",
    Reason.NETWORK_DENIED: "network denied",
    Reason.PRIVATE_ADDRESS: "private or special-purpose address",
    Reason.REDIRECT_LIMIT: "too many redirects",
    Reason.REDIRECT_DOWNGRADE: "redirect from https to http",
    Reason.METHOD_NOT_ALLOWED: "method not allowed",
    Reason.CONTENT_TYPE_NOT_ALLOWED: "content type not allowed",
    Reason.NOT_TLS: "the tunnel did not start with TLS",
    Reason.SNI_MISMATCH: "the TLS server name differs from the CONNECT host",
    Reason.SENSITIVE_DATA: "sensitive data in the request",
}


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one check. `allowed` is what the gateway does; `reason` and `rule` say
    which rule decided (on an allow, `reason` is None unless report mode relaxed a denial)."""

    allowed: bool
    reason: Reason | None
    rule: str
    policy_name: str
    policy_sha256: str
    enforced: bool = True
    message: str | None = None  # the deciding rule's own message, shown to the agent
    detail: str | None = None  # e.g. which address and range
    dlp: Finding | None = None  # what outbound data-loss prevention found (never the data)

    @property
    def verdict(self) -> str:
        """What the rule said: "deny" also for a would-be denial that report mode let pass."""
        return "deny" if self.reason is not None else "allow"

    def describe(self) -> str:
        if self.reason is None:
            return f"allowed by {self.rule} of policy {self.policy_name!r}"
        if self.rule in CONFIG_RULES:
            by = f"by the gateway configuration ({self.rule}; policy {self.policy_name!r})"
        else:
            by = f"by policy {self.policy_name!r} ({self.rule})"
        text = f"{_DESCRIPTIONS[self.reason]} {by}"
        if self.detail:
            text += f": {self.detail}"
        if self.message:
            text += f": {self.message}"
        if not self.enforced:
            text += " [report mode: not enforced]"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The policy block of audit records and explain output."""
        out: dict[str, Any] = {
            "decision": self.verdict,
            "reason": str(self.reason) if self.reason else None,
            "rule": self.rule,
            "enforced": self.enforced,
        }
        if self.message:
            out["message"] = self.message
        return out


# Decisions are immutable and a policy gives out few distinct ones, so the common ones (no
# per-request detail) are made once: building a frozen dataclass costs more than the lookup.
@functools.lru_cache(maxsize=4096, typed=True)
def _shared_decision(
    allowed: bool,
    reason: Reason | None,
    rule: str,
    policy_name: str,
    policy_sha256: str,
    enforced: bool,
    message: str | None,
) -> Decision:
    return Decision(allowed, reason, rule, policy_name, policy_sha256, enforced, message)


def _allow(policy: Policy, rule: str) -> Decision:
    return _shared_decision(True, None, rule, policy.name, policy.sha256, True, None)


def _deny(
    policy: Policy,
    reason: Reason,
    rule: str,
    *,
    message: str | None = None,
    detail: str | None = None,
) -> Decision:
    relaxed = policy.mode is Mode.REPORT and reason in RELAXED_IN_REPORT_MODE
    if detail is None:
        return _shared_decision(
            relaxed, reason, rule, policy.name, policy.sha256, not relaxed, message
        )
    return Decision(relaxed, reason, rule, policy.name, policy.sha256, not relaxed, message, detail)


def decide_url(
    policy: Policy,
    url: str,
    *,
    tool: str | None = "WebFetch",
    method: str | None = None,
    outbound: bool = True,
    needs: Sequence[str] = (),
) -> tuple[Decision, Target | None]:
    """Steps 1-3: everything that can be decided without DNS. `tool=None` for the proxy;
    `needs` as for `decide_tool`. `outbound=False` for a URL the web chose (a redirect
    target, a search result), which DLP does not look at: the agent did not write it."""
    try:
        target = parse_url(url)
    except UnsupportedSchemeError as exc:
        if tool is not None and not _enabled(policy, tool, needs):
            return _tool_disabled(policy, tool, needs), None
        return _deny(policy, Reason.SCHEME_NOT_ALLOWED, "schemes", detail=str(exc)), None
    except InvalidURLError as exc:
        return _deny(policy, Reason.INVALID_URL, "url", detail=str(exc)), None
    sent = url if outbound else None
    decision = decide_target(policy, target, tool=tool, method=method, sent=sent, needs=needs)
    return decision, target


def decide_target(
    policy: Policy,
    target: Target,
    *,
    tool: str | None = "WebFetch",
    method: str | None = None,
    sent: str | None = None,
    connect_ports: Collection[int] | None = None,
    needs: Sequence[str] = (),
) -> Decision:
    """Steps 2-3 for an already parsed target (redirect hops, CONNECT); `sent` is the URL as
    the agent wrote it (for a CONNECT, `https://host:port`), which step 2b looks at.
    `connect_ports` (a CONNECT only) are the gateway configuration's `proxy.connect_ports`,
    checked before the policy's own rules, refused and relaxed in report mode as they are."""
    if tool is not None and not _enabled(policy, tool, needs):
        return _tool_disabled(policy, tool, needs)
    if connect_ports is not None and target.port not in connect_ports:
        ports = ", ".join(map(str, connect_ports)) or "none"
        return _deny(
            policy,
            Reason.PORT_NOT_ALLOWED,
            CONNECT_PORTS_RULE,
            detail=f"{target.port} (tunnels go to {ports})",
        )
    if target.scheme not in policy.schemes:
        return _deny(policy, Reason.SCHEME_NOT_ALLOWED, "schemes", detail=target.scheme)
    if target.port not in policy.ports:
        return _deny(policy, Reason.PORT_NOT_ALLOWED, "ports", detail=str(target.port))
    if method is not None and method not in policy.methods:
        # Methods are case-sensitive tokens (RFC 9110 9.1): `get` is not GET, and what is
        # allowed is forwarded exactly as written, so no rule for GET applies to `get`.
        detail = representable(method, limit=32)
        if method.upper() in policy.methods:
            detail += f" (methods are case-sensitive; {method.upper()} is allowed)"
        return _deny(policy, Reason.METHOD_NOT_ALLOWED, "methods", detail=detail)
    if sent is not None and policy.dlp.mode is not DlpMode.OFF:
        # What is dialled (the mapped host) is looked at, not only what was written.
        finding = policy.dlp.scan_url(sent, None if target.ip is not None else target.host)
        if finding is not None:
            return with_finding(policy, _decide_destination(policy, target), finding)
    return _decide_destination(policy, target)


def _decide_destination(policy: Policy, target: Target) -> Decision:
    if target.ip is not None:
        return _decide_ip_literal(policy, target.ip, target.port, target.host)
    return decide_host(policy, target.host)


def with_finding(
    policy: Policy, decision: Decision, finding: Finding, *, mode: DlpMode | None = None
) -> Decision:
    """Step 2b's outcome for data `finding` names, given the decision without it: refused
    when DLP enforces (`mode`, by default `dlp.mode`); otherwise that decision, carrying the
    finding (and, if it allowed, reporting the would-be denial as report mode does)."""
    mode = policy.dlp.mode if mode is None else mode
    enforced = policy.mode is Mode.ENFORCE and mode is DlpMode.ENFORCE
    if decision.dlp is not None:
        return decision  # the first finding decides
    if not enforced and decision.reason is not None:
        return replace(decision, dlp=finding)  # a denial (or a reported one) stands
    return Decision(
        not enforced,
        Reason.SENSITIVE_DATA,
        finding.rule,
        policy.name,
        policy.sha256,
        enforced,
        None,
        f"found in {finding.location}",
        finding,
    )


def decide_untrusted_host(
    policy: Policy, decision: Decision, target: Target, sent: str, *, only_from_content: bool
) -> Decision:
    """The provenance-aware part of step 2b (`dlp.untrusted_hosts`): a request to a host the
    client has only ever seen inside web content the gateway handed it (`only_from_content`,
    from the caller's sightings), which no domain rule names, and which carries high-entropy
    or secret-shaped data anywhere in its URL, is `sensitive_data` by `dlp.untrusted_host`."""
    mode = policy.dlp.untrusted_hosts
    if mode is DlpMode.OFF or not only_from_content or decision.dlp is not None:
        return decision
    if not decision.allowed and decision.enforced:
        return decision  # refused already
    if target.ip is None and (
        policy.allow_index.match(target.host) is not None
        or policy.deny_index.match(target.host) is not None
    ):
        return decision  # the policy names it: the operator knows this host
    shaped = policy.dlp.secret_shaped(*split_url(sent))
    if shaped is None:
        return decision
    finding = Finding(UNTRUSTED_HOST, shaped.location, shaped.fingerprint)
    return with_finding(policy, decision, finding, mode=mode)


def decide_query(
    policy: Policy, tool: str, queries: Sequence[str], *, needs: Sequence[str] = ()
) -> Decision:
    """A search call: the tool is enabled (step 2, `needs` as for `decide_tool`), then DLP
    on its queries (step 2b)."""
    decision = decide_tool(policy, tool, needs=needs)
    if not decision.allowed or policy.dlp.mode is DlpMode.OFF:
        return decision
    finding = policy.dlp.scan_queries(queries)
    return decision if finding is None else with_finding(policy, decision, finding)


def decide_host(policy: Policy, host: str) -> Decision:
    """Step 3 for a normalised name: deny wins over allow, then the default."""
    deny = policy.deny_index.match(host)
    if deny is not None:
        rule = policy.domain_deny[deny]
        return _deny(policy, Reason.DOMAIN_DENIED, rule.rule_id, message=rule.message)
    allow = policy.allow_index.match(host)
    if allow is not None:
        return _allow(policy, policy.domain_allow[allow].rule_id)
    if policy.default is Action.ALLOW:
        return _allow(policy, "default")
    return _deny(policy, Reason.DOMAIN_NOT_ALLOWED, "default")


def _decide_ip_literal(policy: Policy, ip: IPAddress, port: int, host: str) -> Decision:
    # `host` is str(ip) already (urls.parse_host), so the denial's detail costs no formatting.
    for rule in policy.network_allow:
        if _in_network(ip, rule.network):
            return _allow(policy, rule.rule_id)
    if policy.default is Action.ALLOW:
        address = decide_address(policy, ip, port)
        if not address.allowed:
            return address
        if classify_address(ip).kind is AddressKind.PUBLIC:
            return _allow(policy, "default")
    return _deny(policy, Reason.IP_LITERAL_NOT_ALLOWED, "default", detail=host)


def decide_address(
    policy: Policy,
    ip: IPAddress,
    port: int,
    *,
    own_addresses: Collection[tuple[IPNetwork, int]] = (),
) -> Decision:
    """Step 4 for one address that a connection would go to. Enforced in every mode.

    `own_addresses` holds the gateway's listening (network, port) pairs; a wildcard bind is
    passed as every local network on that port (see fetch.own_addresses).
    """
    cls = classify_address(ip)
    if cls.kind is AddressKind.METADATA:
        return _deny(
            policy, Reason.METADATA_ADDRESS, "networks.metadata", detail=f"{ip}: {cls.label}"
        )
    if own_addresses and _is_own(ip, port, own_addresses):
        return _deny(policy, Reason.OWN_ADDRESS, "networks.own_address", detail=f"{ip} port {port}")
    for rule in policy.network_deny:
        if _in_network(ip, rule.network, every_form=True):
            return _deny(policy, Reason.NETWORK_DENIED, rule.rule_id, detail=str(ip))
    for rule in policy.network_allow:
        if _in_network(ip, rule.network):
            return _allow(policy, rule.rule_id)
    if policy.block_private and cls.kind is AddressKind.PRIVATE:
        return _deny(
            policy, Reason.PRIVATE_ADDRESS, "networks.block_private", detail=f"{ip}: {cls.label}"
        )
    return _allow(policy, "networks")


def decide_answer(
    policy: Policy,
    port: int,
    addresses: Sequence[IPAddress],
    *,
    own_addresses: Collection[tuple[IPNetwork, int]] = (),
) -> Decision:
    """Step 4 for the addresses a connection to `port` could use, in answer order."""
    if not addresses:
        raise ValueError("an address decision needs at least one address")
    decisions = [decide_address(policy, ip, port, own_addresses=own_addresses) for ip in addresses]
    return next((d for d in decisions if not d.allowed), decisions[-1])


def explain_answer(url_decision: Decision, answer_decision: Decision) -> Decision:
    """The decision that explains an allowed URL once its addresses are checked: an address
    that is refused decides, as does an allow that rests on a `networks.allow` exemption (that
    rule is the one that mattered); otherwise the URL's own rule stands."""
    if not answer_decision.allowed or answer_decision.rule.startswith("networks.allow["):
        return answer_decision
    return url_decision


def decide_content_type(policy: Policy, content_type: str | None) -> Decision:
    """After the response head: the bare media type against `limits.content_types`."""
    return _decide_media(policy, content_type, policy.limits.content_types, "limits.content_types")


def decide_proxied_content_type(policy: Policy, content_type: str | None) -> Decision:
    """After a proxied plain-HTTP response's head: `proxy_limits.content_types`, which allows
    every type when the policy leaves it unset (null)."""
    patterns = policy.proxy_limits.content_types
    if patterns is None:
        return _allow(policy, "proxy_limits.content_types")
    return _decide_media(policy, content_type, patterns, "proxy_limits.content_types")


def _decide_media(
    policy: Policy, content_type: str | None, patterns: Sequence[str], rule: str
) -> Decision:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    for pattern in patterns:
        if media and fnmatch.fnmatchcase(media, pattern):
            return _allow(policy, rule)
    # The upstream chose these bytes: escaped and capped before they reach a message or record.
    shown = representable(media, limit=200) if media else "no content type"
    return _deny(policy, Reason.CONTENT_TYPE_NOT_ALLOWED, rule, detail=shown)


def decide_tunnel_start(
    policy: Policy, host: str, *, not_tls: str | None = None, server_name: str | None = None
) -> Decision:
    """The first bytes of a tunnel under the gateway configuration's `proxy.require_tls`: a
    `not_tls` problem (what is wrong with them), else a TLS server name that differs from the
    CONNECT host, refuses; enforced in every mode (nothing else would stop SSH or fronting)."""
    if not_tls is not None:
        return _deny(policy, Reason.NOT_TLS, REQUIRE_TLS_RULE, detail=not_tls)
    if server_name is not None and server_name != host:
        detail = f"SNI {server_name[:100]!r} but CONNECT to {host!r}"
        return _deny(policy, Reason.SNI_MISMATCH, REQUIRE_TLS_RULE, detail=detail)
    return _allow(policy, REQUIRE_TLS_RULE)


def decide_tool(policy: Policy, tool: str, *, needs: Sequence[str] = ()) -> Decision:
    """Tool enablement alone (search and XSearch calls carry no URL to decide). `needs`: the
    tools whose settings enable a tool made of them, in the order the refusal names the
    first one off (the caller knows its tool; by default, the tool's own setting)."""
    if not _enabled(policy, tool, needs):
        return _tool_disabled(policy, tool, needs)
    return _allow(policy, f"tools.{tool}.enabled")


def _enabled(policy: Policy, tool: str, needs: Sequence[str]) -> bool:
    return policy.tool(tool).enabled and (not needs or all(policy.tool(n).enabled for n in needs))


def _tool_disabled(policy: Policy, tool: str, needs: Sequence[str] = ()) -> Decision:
    off = next((name for name in needs if not policy.tool(name).enabled), tool)
    return _deny(policy, Reason.TOOL_DISABLED, f"tools.{off}.enabled", detail=tool)


def _in_network(ip: IPAddress, network: Any, *, every_form: bool = False) -> bool:
    """Whether a rule's CIDR matches `ip`. `every_form` (deny rules): a CIDR written in
    IPv4-mapped form also matches the other IPv6 forms of its IPv4 addresses (NAT64, 6to4),
    as the IPv4 CIDR does; an allow rule in that form names the mapped and IPv4 forms only."""
    if ip.version == network.version:
        if ip in network:
            return True
        if not every_form or ip.version == 4:
            return False
        mapped = mapped_ipv4_network(network)
        if mapped is None:
            return False
        inner = embedded_ipv4(ip)
        return inner is not None and inner in mapped
    # An IPv6 form of an IPv4 address (mapped, NAT64, …) is judged by the IPv4 rules too.
    if ip.version == 6:
        inner = embedded_ipv4(ip)
        return inner is not None and inner in network
    # An IPv4-mapped network (::ffff:10.0.0.0/104) names the IPv4 addresses it maps.
    mapped = mapped_ipv4_network(network)
    return mapped is not None and ip in mapped


def _is_own(ip: IPAddress, port: int, own: Collection[tuple[IPNetwork, int]]) -> bool:
    return any(port == own_port and _in_network(ip, network) for network, own_port in own)
