"""What a refusal tells the agent: the decision in words, and one line saying how to allow it.

The line names the policy key (or gateway configuration key) to change, so whoever reads the
refusal knows where to look, and only a change that would allow the request: a destination no
policy can open (a cloud metadata address, the gateway's own listening address and port) is
`never allowed`, whatever step refused it first (a port, a scheme, an IP literal). An address
refusal never names the address: a name's answer is the internal network, which the agent
must not learn from a refusal (the operator finds it with `gateway policy explain --resolve`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Collection

from gateway.policy.addresses import AddressKind, IPAddress, classify_address, embedded_ipv4
from gateway.policy.engine import CONNECT_PORTS_RULE, Decision, Reason
from gateway.policy.model import IPNetwork
from gateway.policy.urls import SUPPORTED_SCHEMES, Target

OwnAddresses = Collection[tuple[IPNetwork, int]]

# Address checks: their detail holds the address that decided, so a refusal drops it.
ADDRESS_REASONS = frozenset(
    {
        Reason.PRIVATE_ADDRESS,
        Reason.NETWORK_DENIED,
        Reason.METADATA_ADDRESS,
        Reason.OWN_ADDRESS,
    }
)

_NEVER = "never allowed"
_NEVER_METADATA = _NEVER + ": cloud metadata addresses are refused whatever the policy says"
_NEVER_OWN = _NEVER + ": the gateway does not connect to its own listening address"

# By reason code (a string, so that a reason added later falls back to the generic line).
_HOW_TO_ALLOW = {
    "domain_not_allowed": "add the host (or a pattern such as .example.org) to domains.allow",
    "domain_denied": "remove or narrow {rule} (a deny rule wins over domains.allow)",
    "scheme_not_allowed": "add the scheme to schemes",
    "port_not_allowed": "add the port to ports",
    "method_not_allowed": "add the method to methods",
    "ip_literal_not_allowed": "add a CIDR holding the address to networks.allow",
    "private_address": (
        "add a CIDR holding the host's addresses to networks.allow "
        "(gateway policy explain --resolve shows them)"
    ),
    "network_denied": "remove or narrow {rule} (networks.deny wins over networks.allow)",
    "metadata_address": _NEVER_METADATA,
    "own_address": _NEVER_OWN,
    "tool_disabled": "set {rule}: true",
    "redirect_limit": "raise redirects.max",
    "redirect_downgrade": "set redirects.allow_downgrade: true",
    "content_type_not_allowed": "add the media type to {rule}",
    "not_tls": "set proxy.require_tls: false in the gateway configuration",
    "sni_mismatch": _NEVER + ": a tunnel's TLS server name must be its CONNECT host",
    "sensitive_data": "if it is no secret, change {rule} or set dlp.mode: report",
}

# Rules that live in the gateway configuration rather than the policy file.
_CONFIG_RULES = {
    CONNECT_PORTS_RULE: "add the port to proxy.connect_ports in the gateway configuration",
}


def how_to_allow(
    decision: Decision, *, target: Target | None = None, own_addresses: OwnAddresses = ()
) -> str | None:
    """One line: the key to change so that this refusal would be an allow, or `never
    allowed` when no change can (`target`, when known, is checked for that: an IP literal that
    is a metadata address or, with `own_addresses`, the gateway's own); None for a URL that
    does not parse (nothing in a policy makes it valid)."""
    if decision.reason is None or decision.reason is Reason.INVALID_URL:
        return None
    if (
        decision.reason is Reason.SCHEME_NOT_ALLOWED
        and target is None
        and decision.detail is not None
        and decision.detail not in SUPPORTED_SCHEMES  # not a scheme any policy may list
    ):
        return f"{_NEVER}: {decision.detail} (only {', '.join(sorted(SUPPORTED_SCHEMES))})"
    never = _never_allowed(decision, target, own_addresses)
    if never is not None:
        return never
    line = _CONFIG_RULES.get(decision.rule) or _HOW_TO_ALLOW.get(str(decision.reason))
    if line is None:
        return f"change {decision.rule}"
    text = line.format(rule=decision.rule)
    return text if text.startswith(_NEVER) else f"to allow it, {text}"


def refusal_text(
    decision: Decision, *, target: Target | None = None, own_addresses: OwnAddresses = ()
) -> str:
    """The refusal as the agent reads it: the decision (an address check without its
    address), the rule's own message, and how to allow it."""
    shown = decision
    if decision.reason in ADDRESS_REASONS and decision.detail:
        shown = dataclasses.replace(decision, detail=None)
    text = shown.describe()
    hint = how_to_allow(decision, target=target, own_addresses=own_addresses)
    return f"{text}; {hint}" if hint else text


def _never_allowed(
    decision: Decision, target: Target | None, own_addresses: OwnAddresses
) -> str | None:
    """`never allowed: …` for an IP-literal destination that no policy change opens."""
    ip = target.ip if target is not None else None
    if ip is None and decision.reason is Reason.IP_LITERAL_NOT_ALLOWED and decision.detail:
        try:  # the literal, as the engine names it in this refusal's detail
            ip = ipaddress.ip_address(decision.detail.strip("[]"))
        except ValueError:
            ip = None
    if ip is None:
        return None
    if classify_address(ip).kind is AddressKind.METADATA:
        return _NEVER_METADATA
    if target is not None and _is_own(ip, target.port, own_addresses):
        return _NEVER_OWN
    return None


def _is_own(ip: IPAddress, port: int, own_addresses: OwnAddresses) -> bool:
    inner = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    return any(
        port == own_port and (ip in network or (inner is not None and inner in network))
        for network, own_port in own_addresses
    )
