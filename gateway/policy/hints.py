"""What a refusal tells the agent: the decision in words, and one line saying how to allow it.

The line names the policy key (or gateway configuration key) to change, so whoever reads the
refusal knows where to look. An address refusal never names the address: a name's answer is
the internal network, which the agent must not learn from a refusal (the operator finds it
with `gateway policy explain --resolve`).
"""

from __future__ import annotations

import dataclasses

from gateway.policy.engine import CONNECT_PORTS_RULE, Decision, Reason

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
    "metadata_address": _NEVER + ": cloud metadata addresses are refused whatever the policy says",
    "own_address": _NEVER + ": the gateway does not connect to its own listening address",
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


def how_to_allow(decision: Decision) -> str | None:
    """One line: the key to change so that this refusal would be an allow; None for a URL
    that does not parse (nothing in a policy makes it valid)."""
    if decision.reason is None or decision.reason is Reason.INVALID_URL:
        return None
    line = _CONFIG_RULES.get(decision.rule) or _HOW_TO_ALLOW.get(str(decision.reason))
    if line is None:
        return f"change {decision.rule}"
    text = line.format(rule=decision.rule)
    return text if text.startswith(_NEVER) else f"to allow it, {text}"


def refusal_text(decision: Decision) -> str:
    """The refusal as the agent reads it: the decision (an address check without its
    address), the rule's own message, and how to allow it."""
    shown = decision
    if decision.reason in ADDRESS_REASONS and decision.detail:
        shown = dataclasses.replace(decision, detail=None)
    text = shown.describe()
    hint = how_to_allow(decision)
    return f"{text}; {hint}" if hint else text
