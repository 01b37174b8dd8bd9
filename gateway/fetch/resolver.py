"""The one resolver: every answer is checked against a policy before aiohttp may connect.

aiohttp connects to exactly the addresses `resolve` returns (keeping the host name for SNI
and certificate checks), so checking them here pins the connection to checked addresses:
there is no second lookup that a rebinding DNS server could answer differently. One
`PolicyResolver` belongs to one connector, which belongs to one policy, so an answer
approved under one policy is never reused for another.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.policy.addresses import IPAddress
from gateway.policy.engine import Decision, decide_answer
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.urls import parse_host


class AddressDeniedError(Exception):
    """A resolved address was refused. Deliberately not an OSError, so aiohttp passes it
    through unchanged instead of wrapping it as a connection failure."""

    def __init__(self, decision: Decision, addresses: Sequence[IPAddress]) -> None:
        super().__init__(decision.describe())
        self.decision = decision
        self.addresses = tuple(addresses)


class LookupFailedError(OSError):
    """The name did not resolve; aiohttp wraps it as a DNS error (upstream_unreachable)."""


StaticHosts = Mapping[str, Sequence[IPAddress]]


class PolicyResolver(AbstractResolver):
    def __init__(
        self,
        policy: Policy,
        *,
        static_hosts: StaticHosts | None = None,
        own_addresses: Collection[tuple[IPNetwork, int]] = (),
        lookup_timeout: float = 5.0,
    ) -> None:
        self._policy = policy
        self._static = dict(static_hosts or {})
        self._own = own_addresses
        self._lookup_timeout = lookup_timeout
        self.last_answers: dict[str, tuple[IPAddress, ...]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        name = host.rstrip(".")
        addresses = await self.lookup(name)
        decision = decide_answer(self._policy, port, addresses, own_addresses=self._own)
        if not decision.allowed:
            raise AddressDeniedError(decision, addresses)
        self.last_answers[name] = tuple(addresses)
        return [
            {
                "hostname": name,
                "host": str(ip),
                "port": port,
                "family": socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for ip in addresses
        ]

    async def lookup(self, name: str) -> list[IPAddress]:
        """The addresses of a normalised name: the static table first, else the system
        resolver, always asked for the absolute name so search lists never apply."""
        static = self._static.get(name)
        if static is not None:
            return list(static)
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(name + ".", None, type=socket.SOCK_STREAM),
                self._lookup_timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise LookupFailedError(f"{name} did not resolve: {exc}") from exc
        seen: dict[IPAddress, None] = {}
        for info in infos:
            addr = str(info[4][0]).split("%", 1)[0]
            try:
                seen[ipaddress.ip_address(addr)] = None
            except ValueError:
                continue
        if not seen:
            raise LookupFailedError(f"{name} resolved to no usable address")
        return list(seen)

    async def close(self) -> None:
        return None


def parse_static_hosts(table: Mapping[str, Sequence[str]]) -> dict[str, tuple[IPAddress, ...]]:
    """`resolver.hosts` from the config: names normalised like request hosts."""
    out: dict[str, tuple[IPAddress, ...]] = {}
    for name, addresses in table.items():
        host, _ = parse_host(name)
        out[host] = tuple(ipaddress.ip_address(a) for a in addresses)
    return out


def own_listening_addresses(binds: Sequence[tuple[str, int]]) -> tuple[tuple[IPNetwork, int], ...]:
    """The gateway's own (network, port) pairs; a wildcard bind counts as every local
    address on that port (loopback ranges and the host's own addresses)."""
    out: list[tuple[IPNetwork, int]] = []
    for host, port in binds:
        ip = ipaddress.ip_address(host) if host else ipaddress.ip_address("0.0.0.0")
        if ip.is_unspecified:
            for network in ("127.0.0.0/8", "::1/128", "0.0.0.0/32", "::/128"):
                out.append((ipaddress.ip_network(network), port))
            for local in _local_addresses():
                out.append((ipaddress.ip_network(local), port))
        else:
            out.append((ipaddress.ip_network(ip), port))
    return tuple(out)


def _local_addresses() -> list[IPAddress]:
    found: list[IPAddress] = []
    try:
        infos: list[Any] = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        return found
    for info in infos:
        try:
            found.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    return found
