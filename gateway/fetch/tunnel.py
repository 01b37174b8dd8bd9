"""Opening the upstream side of a CONNECT tunnel: the same checks as every fetch, then a TCP
connection to a checked address and nowhere else.

The name is resolved by `PolicyResolver.lookup` (static table, then the system resolver, as
an absolute name), every address in the answer is decided by `decide_answer` with the
gateway's own addresses, and only addresses from that checked answer are dialled (through
`fetch.dial`, which classifies each one again at the socket), so there is no second lookup a
rebinding DNS server could answer differently. Bytes are never read here:
the relay belongs to the proxy.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Callable, Collection
from dataclasses import dataclass

from gateway.errors import PolicyDeniedError, UpstreamTimeoutError, UpstreamUnreachableError
from gateway.fetch.dial import SocketGuard, SocketRefusedError, dial
from gateway.fetch.resolver import LookupFailedError, PolicyResolver, StaticHosts
from gateway.policy.addresses import IPAddress
from gateway.policy.engine import Decision, decide_answer
from gateway.policy.hints import refusal_text
from gateway.policy.model import IPNetwork, Policy
from gateway.policy.urls import Target


@dataclass(frozen=True, slots=True)
class OpenedTunnel:
    transport: asyncio.Transport
    protocol: asyncio.Protocol
    ip: IPAddress  # the checked address actually connected to
    decision: Decision  # the address decision that allowed it


class AddressCheckFailed(PolicyDeniedError):
    """An address of the answer was refused; `addresses` is the whole answer."""

    def __init__(self, decision: Decision, addresses: tuple[IPAddress, ...]) -> None:
        super().__init__(decision, refusal_text(decision))
        self.addresses = addresses


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def resolve_checked(
    policy: Policy,
    target: Target,
    *,
    static_hosts: StaticHosts,
    own_addresses: Collection[tuple[IPNetwork, int]],
) -> tuple[tuple[IPAddress, ...], Decision]:
    """The addresses a connection to `target` may use, all of them checked; raises
    AddressCheckFailed (a PolicyDeniedError) or UpstreamUnreachableError."""
    literal = target.ip if target.ip is not None else _literal(target.host)
    if literal is not None:
        # A literal is dialled as it is (no lookup), also one a parser failed to mark.
        addresses: tuple[IPAddress, ...] = (literal,)
    else:
        resolver = PolicyResolver(
            policy,
            static_hosts=static_hosts,
            own_addresses=own_addresses,
            lookup_timeout=policy.timeouts.connect,
        )
        try:
            addresses = tuple(await resolver.lookup(target.host))
        except LookupFailedError as exc:
            raise UpstreamUnreachableError(f"the host name did not resolve ({exc})") from None
    decision = decide_answer(policy, target.port, addresses, own_addresses=own_addresses)
    if not decision.allowed:
        raise AddressCheckFailed(decision, addresses)
    return addresses, decision


async def open_tunnel(
    policy: Policy,
    target: Target,
    protocol_factory: Callable[[], asyncio.Protocol],
    *,
    static_hosts: StaticHosts,
    own_addresses: Collection[tuple[IPNetwork, int]],
    connect_timeout: float | None = None,
    tls: ssl.SSLContext | None = None,
    lookup_apart: bool = False,
) -> OpenedTunnel:
    """Resolve, check and connect; the addresses are tried in answer order within one
    `timeouts.connect` budget. With `tls`, the TLS handshake is in the budget too, and the
    certificate is checked against `target.host` while the checked address is dialled.
    `lookup_apart`: the lookup is not in that budget but has its own (the resolver's, as
    long), so a name server that never answers is a lookup that failed (unreachable), not a
    connection that timed out. Raises PolicyDeniedError, UpstreamUnreachableError or
    UpstreamTimeoutError."""
    timeout = connect_timeout or policy.timeouts.connect
    resolved: tuple[tuple[IPAddress, ...], Decision] | None = None
    if lookup_apart:
        resolved = await resolve_checked(
            policy, target, static_hosts=static_hosts, own_addresses=own_addresses
        )
    try:
        async with asyncio.timeout(timeout):
            addresses, decision = resolved or await resolve_checked(
                policy, target, static_hosts=static_hosts, own_addresses=own_addresses
            )
            guard = SocketGuard(policy, own_addresses)
            failure: OSError | None = None
            for ip in addresses:
                try:
                    transport, protocol = await dial(
                        guard, ip, target.port, protocol_factory, tls=tls, server_name=target.host
                    )
                except SocketRefusedError as exc:
                    raise AddressCheckFailed(exc.decision, addresses) from None
                except ssl.SSLCertVerificationError as exc:
                    raise UpstreamUnreachableError(
                        f"the upstream's TLS certificate failed: {exc.verify_message}"
                    ) from None
                except ssl.SSLError:
                    raise UpstreamUnreachableError(
                        "the TLS handshake with the upstream failed"
                    ) from None
                except OSError as exc:
                    failure = exc
                    continue
                return OpenedTunnel(transport, protocol, ip, decision)
    except TimeoutError:
        raise UpstreamTimeoutError(
            f"no connection to {target.host} port {target.port} within {timeout:g} s"
            " (timeouts.connect)"
        ) from None
    reason = failure.strerror if failure is not None and failure.strerror else str(failure)
    raise UpstreamUnreachableError(
        f"could not connect to {target.host} port {target.port} ({reason})"
    )
