"""The socket choke point: every outbound connection the gateway makes is dialled here.

Safety must not rest on every parser agreeing on what a host is. Whatever the URL parser,
the policy and the resolver concluded, the address about to be dialled is classified once
more, at the socket, by the same address rules (metadata, the gateway's own listeners,
`networks.deny`, `networks.allow`, `block_private`), and a refused address never sees a
packet. Every outbound connection calls `dial` (the upstream client of `fetch.upstream`, for
the Fetcher and the proxy alike, and the proxy's CONNECT tunnels), names and IP literals
alike; TLS, when asked for, is set up on the socket `dial` checked.

The only outbound sockets outside this module are the operator's own: the Redis client of
`state.redis` and the system resolver's DNS queries. `tests/test_layers.py` fails if any
other module opens a connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Callable, Collection
from typing import Any

from gateway.policy.addresses import IPAddress
from gateway.policy.engine import Decision, Reason, decide_answer
from gateway.policy.model import IPNetwork, Policy

# (family, type, proto, canonname, sockaddr), as getaddrinfo and aiohappyeyeballs give it.
AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]


class SocketRefusedError(Exception):
    """The address about to be dialled is refused by the address rules.

    Deliberately not an OSError: the tunnel opener tries the next address on an OSError,
    and a refusal must end the attempt with its reason and rule instead."""

    def __init__(self, decision: Decision, ip: IPAddress) -> None:
        super().__init__(decision.describe())
        self.decision = decision
        self.ip = ip


class SocketGuard:
    """The address rules of one policy (and the gateway's own listeners), applied at dial time."""

    __slots__ = ("_policy", "_own")

    def __init__(self, policy: Policy, own_addresses: Collection[tuple[IPNetwork, int]]) -> None:
        self._policy = policy
        self._own = tuple(own_addresses)

    @property
    def policy(self) -> Policy:
        return self._policy

    def check(self, address: str, port: int) -> IPAddress:
        """The address as dialled (a sockaddr's host, maybe with an IPv6 zone) -> its IP, or
        SocketRefusedError. Anything that is not a numeric address is refused too: a socket
        is only ever connected to an address this function has classified."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            raise SocketRefusedError(_unreadable(self._policy), _UNSPECIFIED) from None
        decision = decide_answer(self._policy, port, [ip], own_addresses=self._own)
        if not decision.allowed:
            raise SocketRefusedError(decision, ip)
        return ip

    def open_socket(self, addr_info: AddrInfo) -> socket.socket:
        """A new, unconnected socket for `addr_info`, once its address passed `check`."""
        family, type_, proto, _, sockaddr = addr_info
        self.check(str(sockaddr[0]), int(sockaddr[1]))
        return socket.socket(family=family, type=type_, proto=proto)


async def dial(
    guard: SocketGuard,
    ip: IPAddress,
    port: int,
    protocol_factory: Callable[[], asyncio.Protocol],
    *,
    tls: ssl.SSLContext | None = None,
    server_name: str | None = None,
) -> tuple[asyncio.Transport, asyncio.Protocol]:
    """Connect a TCP stream to `ip`:`port` through the guard (SocketRefusedError, or the
    OSError of a failed connect); the caller bounds the time. With `tls`, the TLS handshake
    follows on the same socket: SNI and the certificate check are for `server_name` (the
    name asked for), whatever address was dialled (ssl.SSLError when it fails)."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    sockaddr: tuple[Any, ...] = (str(ip), port, 0, 0) if ip.version == 6 else (str(ip), port)
    sock = guard.open_socket((family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
    loop = asyncio.get_running_loop()
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, sockaddr)
        transport, protocol = await loop.create_connection(
            protocol_factory,
            sock=sock,
            ssl=tls,
            server_hostname=server_name if tls is not None else None,
        )
    except BaseException:
        sock.close()
        raise
    return transport, protocol


_UNSPECIFIED = ipaddress.ip_address("0.0.0.0")


def _unreadable(policy: Policy) -> Decision:
    # Never expected (`dial` passes numeric sockaddrs), so never allowed.
    return Decision(
        False,
        Reason.NETWORK_DENIED,
        "networks",
        policy.name,
        policy.sha256,
        detail="the address to dial is not a numeric IP address",
    )
