"""The one resolver: every answer is checked against a policy before a connection is made.

Names are answered from the configuration's `resolver.hosts`, then (with
`resolver.system_hosts`) from /etc/hosts, then by the system resolver, asked for the absolute
name. `localhost` is no exception: it resolves the same way (usually from /etc/hosts), and its
addresses are decided by the policy like any other answer.

The tunnel opener (`fetch.tunnel`, for the one upstream client and CONNECT tunnels) dials
exactly the addresses `lookup` returned, once each is decided (keeping the host name for
SNI and certificate checks), so the connection is pinned to checked addresses: there is no
second lookup that a rebinding DNS server could answer differently. A `PolicyResolver`
belongs to one policy, so an answer approved under one policy is never reused for another.
`resolve` answers in the shape of aiohttp's public resolver interface (`aiohttp.abc`), with
the answer decided the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.fetch.lookups import SYSTEM_LOOKUPS, SystemLookups
from gateway.policy.addresses import IPAddress
from gateway.policy.engine import Decision, decide_answer
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.urls import parse_host


class AddressDeniedError(Exception):
    """A resolved address was refused (by `resolve`). Deliberately not an OSError, so no
    caller takes it for a connection failure."""

    def __init__(self, decision: Decision, addresses: Sequence[IPAddress]) -> None:
        super().__init__(decision.describe())
        self.decision = decision
        self.addresses = tuple(addresses)


class LookupFailedError(OSError):
    """The name did not resolve (upstream_unreachable, as the tunnel opener says)."""


StaticHosts = Mapping[str, Sequence[IPAddress]]

SYSTEM_HOSTS_PATH = "/etc/hosts"
MAX_HOSTS_FILE_BYTES = 4 << 20


class SystemHosts:
    """/etc/hosts as a table of name -> addresses, read again when the file changes (its
    size or modification time), never more than MAX_HOSTS_FILE_BYTES. A file that cannot be
    read answers nothing: the name then goes to the system resolver."""

    def __init__(self, path: str = SYSTEM_HOSTS_PATH) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._table: dict[str, tuple[IPAddress, ...]] = {}

    def table(self) -> Mapping[str, tuple[IPAddress, ...]]:
        try:
            info = os.stat(self.path)
        except OSError:
            self._seen, self._table = None, {}
            return self._table
        seen = (info.st_mtime_ns, info.st_size)
        if seen != self._seen:
            self._table = _read_hosts_file(self.path)
            self._seen = seen
        return self._table


def _read_hosts_file(path: str) -> dict[str, tuple[IPAddress, ...]]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_HOSTS_FILE_BYTES)
    except OSError:
        return {}
    return parse_hosts_text(data.decode("utf-8", "replace"))


def parse_hosts_text(text: str) -> dict[str, tuple[IPAddress, ...]]:
    """hosts(5): an address, then its names; `#` starts a comment. Names are folded to lower
    case without a trailing dot; an address listed for a name again is kept once."""
    table: dict[str, dict[IPAddress, None]] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        try:
            ip = ipaddress.ip_address(fields[0].split("%", 1)[0])
        except ValueError:
            continue
        for name in fields[1:]:
            table.setdefault(name.rstrip(".").lower(), {})[ip] = None
    return {name: tuple(found) for name, found in table.items()}


class HostsTable(Mapping[str, Sequence[IPAddress]]):
    """The names the gateway answers itself: `resolver.hosts` first, then, when
    `system_hosts` is on, /etc/hosts. Both answers are checked like any other."""

    def __init__(self, static: StaticHosts, system: SystemHosts | None = None) -> None:
        self.static = dict(static)
        self.system = system

    def __getitem__(self, name: str) -> Sequence[IPAddress]:
        found = self.static.get(name)
        if found is None and self.system is not None:
            found = self.system.table().get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        names = dict.fromkeys(self.static)
        if self.system is not None:
            names.update(dict.fromkeys(self.system.table()))
        return iter(names)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def hosts_table(
    static: Mapping[str, Sequence[str]], *, system_hosts: bool, path: str = SYSTEM_HOSTS_PATH
) -> HostsTable:
    """The table for `resolver.hosts` and `resolver.system_hosts` from the configuration."""
    return HostsTable(parse_static_hosts(static), SystemHosts(path) if system_hosts else None)


def unresolved_hint(name: str, table: StaticHosts | None = None) -> str:
    """Why a name that /etc/hosts lists did not resolve, and the keys that fix it."""
    if isinstance(table, HostsTable) and table.system is not None:
        return ""
    if name not in _read_hosts_file(SYSTEM_HOSTS_PATH):
        return ""
    return (
        f"; {name} is in /etc/hosts, which the gateway reads only with resolver.system_hosts: "
        "true (or list the name under resolver.hosts)"
    )


class PolicyResolver(AbstractResolver):
    def __init__(
        self,
        policy: Policy,
        *,
        static_hosts: StaticHosts | None = None,
        own_addresses: Collection[tuple[IPNetwork, int]] = (),
        lookup_timeout: float = 5.0,
        lookups: SystemLookups = SYSTEM_LOOKUPS,
    ) -> None:
        self._policy = policy
        self._lookups = lookups
        self._static: StaticHosts = static_hosts if static_hosts is not None else {}
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
        resolver (in threads of its own, gateway/fetch/lookups.py), always asked for the
        absolute name so search lists never apply."""
        static = self._static.get(name)
        if static is not None:
            return list(static)
        try:
            infos = await asyncio.wait_for(
                self._lookups.getaddrinfo(name + "."), self._lookup_timeout
            )
        except (OSError, TimeoutError) as exc:
            hint = unresolved_hint(name, self._static)
            raise LookupFailedError(f"{name} did not resolve: {exc}{hint}") from exc
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
    address on that port (loopback ranges and the host's own addresses). 0.0.0.0/8 and ::
    are its own on every bound port, whatever the bind: Linux connects a socket dialled to
    them to a listener on this host (0.0.0.0:PORT reaches 127.0.0.1:PORT)."""
    out: list[tuple[IPNetwork, int]] = []
    for host, port in binds:
        ip = ipaddress.ip_address(host) if host else ipaddress.ip_address("0.0.0.0")
        for network in ("0.0.0.0/8", "::/128"):
            out.append((ipaddress.ip_network(network), port))
        if ip.is_unspecified:
            for network in ("127.0.0.0/8", "::1/128"):
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
