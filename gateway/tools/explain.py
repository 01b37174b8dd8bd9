"""Explaining a URL: which rule would decide a call for it, and why, without fetching it.

The one use case behind `POST /v1/policy/explain` and `gateway policy explain|test`, so both
give the same verdict for the same URL, tool, method and addresses: steps 1-3 of the decision
for the URL, then step 4 for an IP literal, for the addresses a test case names, or (when
asked to resolve) for the name's addresses from the gateway's own resolver. A name the
URL's rules deny never reaches DNS; a name that does not resolve is denied as a fetch would
be (`upstream_unreachable`, rule `resolve`). A refusal carries the message an agent would be
shown and its hint (how to allow it, or that nothing can). The adapters only render the
`Verdict`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gateway.policy.addresses import IPAddress
from gateway.policy.engine import (
    Decision,
    Reason,
    decide_answer,
    decide_target,
    decide_url,
    explain_answer,
)
from gateway.policy.hints import how_to_allow, refusal_text
from gateway.policy.load import PolicyValidationError, load_default_policy, load_policy_file
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.urls import Target
from gateway.tools import forward
from gateway.tools.registry import TOOL_NEEDS

# What the policy author's adapter (`gateway policy`) names besides the verdict (the policy
# file's loader, its error, the types it passes on): it never imports gateway.policy itself.
__all__ = [
    "REASONS",
    "IPAddress",
    "OwnAddresses",
    "Policy",
    "PolicyValidationError",
    "Verdict",
    "answer_table",
    "asking_tool",
    "explain",
    "judge",
    "listening_addresses",
    "load_default_policy",
    "load_policy_file",
]

REASONS = tuple(reason.value for reason in Reason)
OwnAddresses = Collection[tuple[IPNetwork, int]]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a fetch of the URL would meet: the decision, and the addresses checked."""

    decision: Decision
    addresses: tuple[IPAddress, ...] = ()
    lookup_error: str | None = None
    note: str | None = None  # e.g. why --method was not checked
    target: Target | None = None
    own_addresses: tuple[tuple[IPNetwork, int], ...] = ()

    @property
    def message(self) -> str | None:
        """A refusal (or a would-be one, in report mode) as the agent would read it: the
        decision, the rule's own message and the hint; None for an allow."""
        if self.lookup_error:
            return f"the name did not resolve, so a fetch would be refused: {self.lookup_error}"
        if self.decision.reason is None:
            return None
        return refusal_text(self.decision, target=self.target, own_addresses=self.own_addresses)

    @property
    def hint(self) -> str | None:
        """How to allow what was refused (`to allow it, …`), or `never allowed: …` when no
        policy change can; None for an allow, a lookup failure or a URL that does not parse."""
        if self.lookup_error or self.decision.reason is None:
            return None
        return how_to_allow(self.decision, target=self.target, own_addresses=self.own_addresses)

    @property
    def verdict(self) -> str:
        return "deny" if self.lookup_error else self.decision.verdict

    @property
    def reason(self) -> str | None:
        if self.lookup_error:
            return "upstream_unreachable"  # what the agent would get: never an allow
        return str(self.decision.reason) if self.decision.reason else None

    @property
    def rule(self) -> str:
        return "resolve" if self.lookup_error else self.decision.rule

    @property
    def enforced(self) -> bool:
        # Fail closed, as a fetch would: a name that does not resolve is refused in any mode.
        return self.decision.enforced or self.lookup_error is not None

    @property
    def checked_addresses(self) -> bool:
        """Whether step 4 ran (or was tried): an IP literal, given or resolved addresses."""
        return bool(self.addresses) or self.lookup_error is not None


def judge(
    policy: Policy,
    url: str,
    *,
    tool: str | None = None,
    method: str | None = None,
    addresses: Sequence[IPAddress] | None = None,
    own_addresses: OwnAddresses = (),
    connect_ports: Collection[int] | None = None,
) -> Verdict:
    """Steps 1-3 for the URL, then step 4 for an IP literal or for the given addresses.
    `method="CONNECT"` judges `host:port` (or an https URL's) as the proxy judges a tunnel,
    with `connect_ports` standing for the gateway configuration's `proxy.connect_ports`.

    `tool` defaults to WebFetch, or, with a `method`, to none (`asking_tool`). A denial at
    any step decides. On an allow the URL's rule stands, unless an address passed only
    through a `networks.allow` exemption: then that rule is the one that mattered.
    """
    tool = asking_tool(tool, method)
    decision, target, note = _decide_proxied(
        policy, url, tool=tool, method=method, connect_ports=connect_ports
    )
    own = tuple(own_addresses)
    if not decision.allowed or target is None:
        return Verdict(decision, note=note, target=target, own_addresses=own)
    if target.ip is not None:
        addresses = (target.ip,)
    if not addresses:
        return Verdict(decision, note=note, target=target, own_addresses=own)
    answer = decide_answer(policy, target.port, addresses, own_addresses=own_addresses)
    return Verdict(
        explain_answer(decision, answer),
        tuple(addresses),
        note=note,
        target=target,
        own_addresses=own,
    )


async def explain(
    policy: Policy,
    url: str,
    *,
    tool: str | None = None,
    method: str | None = None,
    resolve: bool = False,
    static_hosts: Mapping[str, Sequence[IPAddress]] | None = None,
    own_addresses: OwnAddresses = (),
    connect_ports: Collection[int] | None = None,
) -> Verdict:
    """`judge`, and with `resolve` the allowed name's addresses checked too: from
    `static_hosts` (the configuration's `resolver.hosts`), else the system resolver, asked
    for the absolute name, exactly as a fetch would ask."""
    verdict = judge(
        policy,
        url,
        tool=tool,
        method=method,
        own_addresses=own_addresses,
        connect_ports=connect_ports,
    )
    if not resolve:
        return verdict
    decision, target, note = _decide_proxied(
        policy, url, tool=asking_tool(tool, method), method=method, connect_ports=connect_ports
    )
    # A denied name never reaches DNS, here as in the gateway; IP literals need no lookup.
    if not decision.allowed or target is None or target.ip is not None:
        return verdict
    # Imported here, not at the top: `gateway policy check|test` never resolve, and so never
    # load aiohttp (which the resolver's module brings).
    from gateway.fetch.resolver import LookupFailedError, PolicyResolver

    resolver = PolicyResolver(policy, static_hosts=static_hosts)
    try:
        addresses = await resolver.lookup(target.host)
    except (LookupFailedError, UnicodeError, ValueError) as exc:
        return Verdict(decision, lookup_error=str(exc), note=note, target=target)
    return judge(
        policy,
        url,
        tool=tool,
        method=method,
        addresses=addresses,
        own_addresses=own_addresses,
        connect_ports=connect_ports,
    )


def answer_table(
    hosts: Mapping[str, Sequence[str]], *, system_hosts: bool
) -> Mapping[str, Sequence[IPAddress]]:
    """The names a gateway answers itself (`resolver.hosts`, and /etc/hosts with
    `resolver.system_hosts`), for `explain(static_hosts=…)` as the gateway would look them up."""
    from gateway.fetch.resolver import hosts_table  # loads aiohttp: only when asked

    return hosts_table(hosts, system_hosts=system_hosts)


def listening_addresses(binds: Sequence[tuple[str, int]]) -> OwnAddresses:
    """The own (network, port) pairs of a gateway listening on `binds` (IP literals; a
    wildcard counts as every local address), as it counts them once listening."""
    from gateway.fetch.resolver import own_listening_addresses

    return own_listening_addresses(binds)


def asking_tool(tool: str | None, method: str | None) -> str | None:
    """The tool whose enablement applies: the one named, else none for a forward-proxy
    request (a method given: the proxy serves no tool), else WebFetch."""
    if tool is not None:
        return tool
    return None if method is not None else "WebFetch"


def _decide_proxied(
    policy: Policy,
    url: str,
    *,
    tool: str | None,
    method: str | None,
    connect_ports: Collection[int] | None = None,
) -> tuple[Decision, Target | None, str | None]:
    """Steps 1-3, with `methods` only where the gateway sees the method, as the proxy does:
    a plain http:// request. An https URL reaches the proxy as a CONNECT tunnel, decided by
    host, port and addresses; the method travels inside TLS. The note says so."""
    if method is not None and method.upper() == "CONNECT":
        return _decide_tunnel(policy, url, connect_ports)
    needs = TOOL_NEEDS.get(tool, ()) if tool else ()
    decision, target = decide_url(policy, url, tool=tool, method=method, needs=needs)
    if method is None or target is None or target.scheme == "http":
        return decision, target, None
    scheme = target.scheme
    decision, target = decide_url(policy, url, tool=tool, needs=needs)
    note = (
        f"methods not checked for {method}: an {scheme} URL goes through a CONNECT "
        "tunnel, where the gateway never sees the method (methods applies to plain-http "
        "proxy requests only)"
    )
    return decision, target, note


def _decide_tunnel(
    policy: Policy, url: str, connect_ports: Collection[int] | None
) -> tuple[Decision, Target | None, str | None]:
    authority = url.partition("://")[2].partition("/")[0] if "://" in url else url
    target = forward.connect_target(authority)
    if target is None:  # the proxy answers 400
        detail = f"a CONNECT names host:port (e.g. example.com:443), not {authority!r}"
        decision = Decision(
            False, Reason.INVALID_URL, "url", policy.name, policy.sha256, detail=detail
        )
        return decision, None, None
    if connect_ports is None:
        decision = decide_target(policy, target, tool=None, sent=f"https://{authority}")
        return decision, target, "as a CONNECT tunnel; proxy.connect_ports not checked"
    decision = forward.decide_connect(policy, target, authority, connect_ports)
    ports = ", ".join(map(str, connect_ports))
    return decision, target, f"as a CONNECT tunnel, with proxy.connect_ports: [{ports}]"
