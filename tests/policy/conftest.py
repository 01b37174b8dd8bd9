"""Policies built directly from the model, so engine tests do not depend on the loader."""

from __future__ import annotations

import ipaddress
from typing import Any

from gateway.policy.hosts import parse_pattern
from gateway.policy.model import Action, DomainRule, Mode, NetworkRule, Policy, ToolSettings


def make_policy(
    *,
    allow: list[str | tuple[str, str]] = (),  # type: ignore[assignment]
    deny: list[str | tuple[str, str]] = (),  # type: ignore[assignment]
    net_allow: list[str] = (),  # type: ignore[assignment]
    net_deny: list[str] = (),  # type: ignore[assignment]
    **fields: Any,
) -> Policy:
    def rules(entries: Any, key: str) -> tuple[DomainRule, ...]:
        out = []
        for i, entry in enumerate(entries):
            text, message = (entry, None) if isinstance(entry, str) else entry
            out.append(DomainRule(parse_pattern(text), f"domains.{key}[{i}]", message))
        return tuple(out)

    def nets(entries: Any, key: str) -> tuple[NetworkRule, ...]:
        return tuple(
            NetworkRule(ipaddress.ip_network(c), f"networks.{key}[{i}]")
            for i, c in enumerate(entries)
        )

    fields.setdefault("name", "test")
    fields.setdefault("sha256", "0" * 64)
    return Policy(
        domain_allow=rules(allow, "allow"),
        domain_deny=rules(deny, "deny"),
        network_allow=nets(net_allow, "allow"),
        network_deny=nets(net_deny, "deny"),
        **fields,
    )


__all__ = ["make_policy", "Action", "Mode", "ToolSettings"]
