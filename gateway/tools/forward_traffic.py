"""The forward-traffic use case as the composition root hands it to the proxy adapter: the
machine of each request (`tools/forward_flow.py`, over the decisions of `tools/forward.py`)
and the I/O its commands name (`fetch`'s upstream pool for plain HTTP, a checked connection
for a tunnel, the host sightings). Apart from `forward.py` so
that `policy explain` and the other pure callers of the decisions never load the outbound
client (aiohttp).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable

from gateway.fetch.client import ACCEPT, Fetcher
from gateway.fetch.tunnel import open_tunnel
from gateway.fetch.upstream import UpstreamConnection, UpstreamPool, request_head
from gateway.tools.forward import Verdict, check_provenance
from gateway.tools.forward_flow import (
    CheckProvenance,
    Client,
    Clients,
    ForwardFlow,
    OpenTunnel,
    Reached,
    Send,
    after_reload,
)
from gateway.tools.sightings import HostSightings
from gateway.wire.request import RequestHead


class ForwardTraffic:
    """The forward-traffic use case the composition root hands the proxy adapter: a
    `ForwardFlow` per request (`flow`), and the I/O its commands name, carried out here so the
    adapter names neither a policy type nor `fetch`: where a client met a host
    (`provenance`), the upstream exchange for plain HTTP (`send`, through its own pool), a
    checked connection for a tunnel (`open`), and the re-decision after a reload."""

    def __init__(self, *, fetcher: Fetcher, sightings: HostSightings) -> None:
        self.fetcher = fetcher
        self.sightings = sightings
        self.pool = UpstreamPool(
            static_hosts=lambda: fetcher.static_hosts,
            own_addresses=lambda: fetcher.own_addresses,
        )

    def flow(
        self,
        head: RequestHead,
        source: tuple[str, int] | None,
        *,
        max_body: int,
        connect_ports: Collection[int],
    ) -> ForwardFlow:
        """The machine of one request whose head the adapter has read, under the gateway
        configuration's `server.max_body_bytes` and `proxy.connect_ports`."""
        return ForwardFlow(
            head,
            source,
            max_body=max_body,
            connect_ports=connect_ports,
            own_addresses=self.fetcher.own_addresses,
        )

    async def provenance(self, check: CheckProvenance) -> Verdict:
        """dlp.untrusted_hosts on an allowed request: where this client met the host."""
        verdict = check.verdict
        assert verdict.target is not None
        decision = await check_provenance(
            verdict.policy,
            self.sightings,
            check.client_id,
            verdict.decision,
            verdict.target,
            check.sent,
        )
        return verdict if decision is verdict.decision else verdict.refused(decision)

    async def send(self, send: Send) -> UpstreamConnection:
        """The request to its upstream through the pool; the connection once the response
        head is read (`.head`, `.ip`), to `pipe` and `release`. Raises GatewayError
        (PolicyDeniedError: an address the dial checked and refused)."""
        verdict, body = send.verdict, send.body
        target = verdict.target
        assert target is not None
        request = request_head(
            send.method,
            target,
            upstream_headers(send.headers, self.fetcher.user_agent),
            None if body is None else len(body),
        )
        if body:
            request += body
        return await self.pool.exchange(verdict.policy, target, send.method, request)

    async def open(
        self, command: OpenTunnel, protocol_factory: Callable[[], asyncio.Protocol]
    ) -> tuple[asyncio.Transport, str]:
        """The tunnel's upstream connection, to a checked address: its transport and that
        address. Raises GatewayError (PolicyDeniedError: an address refused)."""
        verdict = command.verdict
        target = verdict.target
        assert target is not None
        opened = await open_tunnel(
            verdict.policy,
            target,
            protocol_factory,
            static_hosts=self.fetcher.static_hosts,
            own_addresses=self.fetcher.own_addresses,
        )
        return opened.transport, str(opened.ip)

    def after_reload(
        self,
        state: Clients,
        client: Client | None,
        reached: Reached | None,
        connect_ports: Collection[int] | None = None,
    ) -> str | None:
        """None when a live connection (a tunnel when `connect_ports` is given, else an idle
        keep-alive one that `reached` this destination) may stay open under the reloaded
        `state`, else why it closes."""
        return after_reload(
            state,
            client,
            reached,
            own_addresses=self.fetcher.own_addresses,
            connect_ports=connect_ports,
        )

    def close(self) -> None:
        """Close the idle upstream connections; none is kept after this."""
        self.pool.close()


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
