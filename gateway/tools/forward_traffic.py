"""The forward-traffic use case as the composition root hands it to the proxy adapter: the
decisions of `tools/forward.py` and the dialling that goes with an allowed one (`fetch`'s
upstream pool for plain HTTP, a checked connection for a tunnel). Apart from `forward.py` so
that `policy explain` and the other pure callers of the decisions never load the outbound
client (aiohttp).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable

from gateway.errors import PolicyDeniedError
from gateway.fetch.client import ACCEPT, Fetcher
from gateway.fetch.tunnel import open_tunnel
from gateway.fetch.upstream import UpstreamConnection, UpstreamPool, request_head
from gateway.policy.engine import Decision
from gateway.policy.model import Policy
from gateway.policy.urls import Target
from gateway.tools.forward import (
    ProxyCall,
    Refused,
    Verdict,
    check_provenance,
    connect_target,
    decide_body,
    decide_connect,
    decide_request,
    decide_response_head,
    still_allowed,
    watches_provenance,
)
from gateway.tools.sightings import HostSightings


class ForwardTraffic:
    """The use case the composition root hands the proxy adapter: every decision, and the
    dialling that goes with an allowed one (the upstream pool for plain HTTP, a checked
    connection for a tunnel), so the adapter names neither a policy type nor `fetch`."""

    def __init__(self, *, fetcher: Fetcher, sightings: HostSightings) -> None:
        self.fetcher = fetcher
        self.sightings = sightings
        self.pool = UpstreamPool(
            static_hosts=lambda: fetcher.static_hosts,
            own_addresses=lambda: fetcher.own_addresses,
        )

    async def request(self, call: ProxyCall, headers: Iterable[tuple[str, str]]) -> Verdict:
        """An absolute-form request (its line and end-to-end headers), provenance included."""
        policy = call.policy
        assert policy is not None
        decision, target = decide_request(policy, call.url, call.method, headers)
        if target is not None and watches_provenance(policy):
            decision = await self._provenance(call, decision, target, call.url)
        return Verdict(policy, decision, target, self.fetcher.own_addresses)

    def body(self, verdict: Verdict, body: bytes) -> Verdict:
        """Its body's prefix, before a byte leaves; `verdict` itself when nothing changed."""
        judged = decide_body(verdict.policy, verdict.decision, body)
        return verdict if judged is verdict.decision else verdict.refused(judged)

    async def send(
        self,
        verdict: Verdict,
        method: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
    ) -> UpstreamConnection:
        """The request to its upstream through the pool; the connection once the response
        head is read (`.head`, `.ip`), to `pipe` and `release`. Raises Refused or another
        GatewayError."""
        target = verdict.target
        assert target is not None
        request = request_head(
            method,
            target,
            upstream_headers(headers, self.fetcher.user_agent),
            None if body is None else len(body),
        )
        if body:
            request += body
        try:
            return await self.pool.exchange(verdict.policy, target, method, request)
        except PolicyDeniedError as exc:
            raise Refused(verdict.refused(exc.decision)) from None

    def response(self, verdict: Verdict, headers: Iterable[tuple[bytes, bytes]]) -> Verdict:
        """A response head with a body, under `proxy_limits.content_types`; `verdict`
        itself when the policy judges no type."""
        if not verdict.judges_content_types:
            return verdict
        judged = decide_response_head(verdict.policy, _content_type(headers))
        if judged.allowed and judged.reason is None:
            return verdict
        return verdict.refused(judged)

    async def connect(self, call: ProxyCall, connect_ports: Collection[int]) -> Verdict | None:
        """A CONNECT (None: its authority is not host:port), provenance included."""
        policy = call.policy
        assert policy is not None
        target = connect_target(call.url)
        if target is None:
            return None
        decision = decide_connect(policy, target, call.url, connect_ports)
        if watches_provenance(policy):
            decision = await self._provenance(call, decision, target, None)
        return Verdict(policy, decision, target, self.fetcher.own_addresses)

    async def open(
        self, verdict: Verdict, protocol_factory: Callable[[], asyncio.Protocol]
    ) -> tuple[asyncio.Transport, str]:
        """The tunnel's upstream connection, to a checked address: its transport and that
        address. Raises Refused or another GatewayError."""
        target = verdict.target
        assert target is not None
        try:
            opened = await open_tunnel(
                verdict.policy,
                target,
                protocol_factory,
                static_hosts=self.fetcher.static_hosts,
                own_addresses=self.fetcher.own_addresses,
            )
        except PolicyDeniedError as exc:
            raise Refused(verdict.refused(exc.decision)) from None
        return opened.transport, str(opened.ip)

    def still_open(
        self,
        policy: Policy,
        verdict: Verdict,
        ip: str | None,
        connect_ports: Collection[int] | None = None,
    ) -> bool:
        """After a reload: whether what `verdict` allowed (a tunnel when `connect_ports` is
        given, else a keep-alive connection), connected to `ip`, stays open under `policy`."""
        assert verdict.target is not None
        return still_allowed(
            policy,
            verdict.target,
            ip,
            own_addresses=self.fetcher.own_addresses,
            connect_ports=connect_ports,
        )

    def close(self) -> None:
        """Close the idle upstream connections; none is kept after this."""
        self.pool.close()

    async def _provenance(
        self, call: ProxyCall, decision: Decision, target: Target, sent: str | None
    ) -> Decision:
        assert call.policy is not None
        return await check_provenance(
            call.policy, self.sightings, call.client_id or "anonymous", decision, target, sent
        )


def upstream_headers(headers: Iterable[tuple[str, str]], user_agent: str) -> list[tuple[str, str]]:
    """The end-to-end headers for the upstream, repeated names joined (RFC 9110 5.3), with
    the gateway's User-Agent and Accept where the client sent none."""
    merged: dict[str, tuple[str, str]] = {}  # by lower-case name: (name as first sent, value)
    for name, value in headers:
        lower = name.lower()
        if lower in merged:
            first, joined = merged[lower]
            merged[lower] = (first, joined + ("; " if lower == "cookie" else ", ") + value)
        else:
            merged[lower] = (name, value)
    out = list(merged.values())
    if "accept-encoding" not in merged:
        out.append(("Accept-Encoding", "identity"))  # the gateway must not add a coding
    if "accept" not in merged:
        out.insert(0, ("Accept", ACCEPT))
    if "user-agent" not in merged:
        out.insert(0, ("User-Agent", user_agent))
    return out


def _content_type(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if len(name) == 12 and name.lower() == b"content-type":
            return value.decode("latin-1")
    return None
