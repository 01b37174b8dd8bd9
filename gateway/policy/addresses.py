"""The blocked-address table: classify_address(ip) says public, private or metadata.

Owns every special-purpose range (each with its RFC), the IPv6 forms that embed an IPv4
address, and inet_aton-style IPv4 literal parsing. Pure stdlib: it never resolves, never asks
the OS (inet_aton differs between C libraries), and never lets ipaddress.is_private/is_global
decide (on 3.11 they get several ranges wrong).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressKind(StrEnum):
    PUBLIC = "public"
    PRIVATE = "private"
    METADATA = "metadata"


@dataclass(frozen=True, slots=True)
class AddressClass:
    kind: AddressKind
    network: str | None  # the blocking range as written in the table, e.g. "10.0.0.0/8"
    label: str | None  # human text; names the embedding when an IPv6 form carried the IPv4


@dataclass(frozen=True, slots=True)
class AddressRange:
    """One row of the table; `first`/`last` are the integer bounds, for a fast scan."""

    network: IPNetwork
    kind: AddressKind
    label: str
    first: int
    last: int

    def holds(self, value: int) -> bool:
        return self.first <= value <= self.last


def _row(cidr: str, label: str, kind: AddressKind = AddressKind.PRIVATE) -> AddressRange:
    network = ipaddress.ip_network(cidr)
    return AddressRange(
        network=network,
        kind=kind,
        label=label,
        first=int(network.network_address),
        last=int(network.broadcast_address),
    )


_METADATA = AddressKind.METADATA

# Refused whatever networks.allow says, and checked before anything else, so that a metadata
# endpoint inside a wider blocked range (CGNAT, 192.0.0.0/24, fc00::/7) reports as metadata.
METADATA_RANGES: tuple[AddressRange, ...] = (
    # The whole link-local block: AWS, GCP, Azure, OCI and DigitalOcean serve instance
    # metadata on 169.254.169.254, ECS task credentials on 169.254.170.2 (RFC 3927).
    _row("169.254.0.0/16", "cloud metadata endpoint (link-local, RFC 3927)", _METADATA),
    # Azure WireServer / platform DNS; an ordinary public-looking address, no RFC.
    _row("168.63.129.16/32", "cloud metadata endpoint (Azure WireServer)", _METADATA),
    # Alibaba Cloud instance metadata, inside CGNAT space.
    _row("100.100.100.200/32", "cloud metadata endpoint (Alibaba Cloud)", _METADATA),
    # Oracle Cloud legacy metadata, inside the IETF protocol assignments block.
    _row("192.0.0.192/32", "cloud metadata endpoint (Oracle Cloud)", _METADATA),
    # AWS instance metadata over IPv6 (IMDS on Nitro), inside unique-local space.
    _row("fd00:ec2::254/128", "cloud metadata endpoint (AWS IMDS over IPv6)", _METADATA),
)

BLOCKED_IPV4: tuple[AddressRange, ...] = (
    _row("0.0.0.0/8", '"this network" (RFC 1122)'),  # RFC 1122 3.2.1.3, RFC 6890
    _row("10.0.0.0/8", "private network (RFC 1918)"),
    _row("100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)"),
    _row("127.0.0.0/8", "loopback (RFC 1122)"),
    # Also in METADATA_RANGES, which wins; kept so the table matches the documented one.
    _row("169.254.0.0/16", "link-local (RFC 3927)"),
    _row("172.16.0.0/12", "private network (RFC 1918)"),
    _row("192.0.0.0/24", "IETF protocol assignments (RFC 6890)"),
    _row("192.0.2.0/24", "documentation, TEST-NET-1 (RFC 5737)"),
    _row("192.31.196.0/24", "AS112-v4 (RFC 7535)"),
    _row("192.52.193.0/24", "automatic multicast tunneling (RFC 7450)"),
    _row("192.88.99.0/24", "deprecated 6to4 relay anycast (RFC 7526)"),
    _row("192.168.0.0/16", "private network (RFC 1918)"),
    _row("192.175.48.0/24", "AS112 direct delegation (RFC 7534)"),
    _row("198.18.0.0/15", "benchmarking (RFC 2544)"),
    _row("198.51.100.0/24", "documentation, TEST-NET-2 (RFC 5737)"),
    _row("203.0.113.0/24", "documentation, TEST-NET-3 (RFC 5737)"),
    _row("224.0.0.0/4", "multicast (RFC 5771)"),
    # Includes the limited broadcast address 255.255.255.255 (RFC 919).
    _row("240.0.0.0/4", "reserved (RFC 1112), incl. broadcast 255.255.255.255 (RFC 919)"),
)

# Checked after the embeddings below. None of them overlaps an embedding prefix except
# 2001::/23, which holds Teredo (2001::/32): Teredo is judged by its client address instead.
BLOCKED_IPV6: tuple[AddressRange, ...] = (
    _row("::/128", "unspecified address (RFC 4291)"),
    _row("::1/128", "loopback (RFC 4291)"),
    # Local-use NAT64 (RFC 8215): its prefix length and translator are site-specific, so
    # whatever IPv4 it carries reaches an internal translator; blocked outright.
    _row("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
    _row("100::/64", "discard-only (RFC 6666)"),
    _row("2001::/23", "IETF protocol assignments (RFC 2928)"),
    _row("2001:db8::/32", "documentation (RFC 3849)"),
    _row("3fff::/20", "documentation (RFC 9637)"),
    _row("5f00::/16", "SRv6 SIDs (RFC 9602)"),
    _row("fc00::/7", "unique local address (RFC 4193)"),
    _row("fe80::/10", "link-local (RFC 4291)"),
    _row("fec0::/10", "deprecated site-local (RFC 3879)"),
    _row("ff00::/8", "multicast (RFC 4291)"),
)

_LOW32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Embedding:
    """An IPv6 prefix whose addresses carry an IPv4 address, and how to get it out."""

    prefix: ipaddress.IPv6Network
    label: str
    first: int
    last: int
    extract: Callable[[int], int]


def _embedding(cidr: str, label: str, extract: Callable[[int], int]) -> Embedding:
    prefix = ipaddress.IPv6Network(cidr)
    return Embedding(
        prefix=prefix,
        label=label,
        first=int(prefix.network_address),
        last=int(prefix.broadcast_address),
        extract=extract,
    )


def _last_32_bits(value: int) -> int:
    return value & _LOW32


def _six_to_four(value: int) -> int:
    # 2002:AABB:CCDD::/48: the IPv4 address is bits 16-48 (RFC 3056 section 2).
    return (value >> 80) & _LOW32


def _teredo_client(value: int) -> int:
    # The client's public address is the last 32 bits, inverted (RFC 4380 section 4).
    return (value & _LOW32) ^ _LOW32


EMBEDDINGS: tuple[Embedding, ...] = (
    _embedding("::ffff:0:0/96", "IPv4-mapped IPv6 (::ffff:0:0/96, RFC 4291)", _last_32_bits),
    _embedding("::/96", "IPv4-compatible IPv6 (::/96, RFC 4291)", _last_32_bits),
    _embedding(
        "::ffff:0:0:0/96", "IPv4-translated IPv6 (::ffff:0:0:0/96, RFC 2765)", _last_32_bits
    ),
    _embedding("64:ff9b::/96", "NAT64 (64:ff9b::/96, RFC 6052)", _last_32_bits),
    _embedding("2002::/16", "6to4 (2002::/16, RFC 3056)", _six_to_four),
    _embedding("2001::/32", "Teredo (2001::/32, RFC 4380)", _teredo_client),
)

# :: and ::1 sit inside ::/96 but are their own addresses, not 0.0.0.0 and 0.0.0.1.
_NOT_COMPATIBLE = frozenset({0, 1})

_PUBLIC = AddressClass(AddressKind.PUBLIC, None, None)


def _lookup(rows: tuple[AddressRange, ...], value: int) -> AddressClass | None:
    for row in rows:
        if row.holds(value):
            return AddressClass(row.kind, str(row.network), row.label)
    return None


def _classify_ipv4(value: int) -> AddressClass:
    return _lookup(METADATA_RANGES, value) or _lookup(BLOCKED_IPV4, value) or _PUBLIC


def _find_embedding(value: int) -> tuple[Embedding, int] | None:
    if value in _NOT_COMPATIBLE:
        return None
    for embedding in EMBEDDINGS:
        if embedding.first <= value <= embedding.last:
            return embedding, embedding.extract(value)
    return None


def classify_address(ip: IPAddress) -> AddressClass:
    """Public, private (any blocked special-purpose range) or metadata, by numeric value.

    Order: metadata endpoints, then (IPv6) an embedded IPv4 address judged as IPv4, then the
    family's blocked table. A zone id (fe80::1%eth0) does not change the answer.
    """
    value = int(ip)
    if ip.version == 4:
        return _classify_ipv4(value)
    metadata = _lookup(METADATA_RANGES, value)
    if metadata is not None:
        return metadata
    found = _find_embedding(value)
    if found is not None:
        embedding, inner_value = found
        inner = _classify_ipv4(inner_value)
        if inner.kind is AddressKind.PUBLIC:
            return _PUBLIC
        inner_ip = ipaddress.IPv4Address(inner_value)
        label = f"{embedding.label} of {inner_ip}: {inner.label}"
        return AddressClass(inner.kind, inner.network, label)
    return _lookup(BLOCKED_IPV6, value) or _PUBLIC


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, SIIT, NAT64, 6to4,
    Teredo client), or None. Local-use NAT64 (64:ff9b:1::/48) is not read: it is blocked
    outright, whatever it carries."""
    found = _find_embedding(int(ip))
    return None if found is None else ipaddress.IPv4Address(found[1])


_MAPPED_PREFIX = ipaddress.IPv6Network("::ffff:0:0/96")


@functools.lru_cache(maxsize=1024)
def mapped_ipv4_network(network: ipaddress.IPv6Network) -> ipaddress.IPv4Network | None:
    """The IPv4 network an IPv6 network inside ::ffff:0:0/96 maps (`::ffff:10.0.0.0/104` is
    10.0.0.0/8), else None. Only the mapped form: a NAT64 or 6to4 address reaches a
    translator, not the IPv4 host itself, and a wider network (`::/0`) names IPv6 space."""
    if network.prefixlen < 96 or not network.subnet_of(_MAPPED_PREFIX):
        return None
    return ipaddress.IPv4Network((int(network.network_address) & _LOW32, network.prefixlen - 96))


def embedded_ipv4_interval(network: ipaddress.IPv6Network) -> tuple[int, int] | None:
    """The IPv4 addresses (first, last as integers) that every address of an IPv6 network
    carries, when the whole network lies in one embedding (mapped, NAT64, 6to4, ...)."""
    first, last = int(network.network_address), int(network.broadcast_address)
    for embedding in EMBEDDINGS:
        if embedding.first <= first and last <= embedding.last:
            # The embedded field's varying bits are its low bits (or all of it), so the
            # IPv4 addresses carried form the interval between the two ends' values.
            low, high = sorted((embedding.extract(first), embedding.extract(last)))
            return low, high
    return None


def metadata_range_holding(network: IPNetwork) -> AddressRange | None:
    """The metadata row that holds every address of `network`, also through an IPv6
    embedding (`::ffff:169.254.0.0/112`, 6to4 `2002:a9fe::/32`), else None: such a network
    names only addresses that are refused whatever `networks.allow` says."""
    first, last = int(network.network_address), int(network.broadcast_address)
    version = network.version
    if version == 6:
        carried = embedded_ipv4_interval(network)  # type: ignore[arg-type]
        if carried is not None:
            (first, last), version = carried, 4
    for row in METADATA_RANGES:
        if row.network.version == version and row.first <= first and last <= row.last:
            return row
    return None


def is_metadata_address(ip: IPAddress) -> bool:
    return classify_address(ip).kind is AddressKind.METADATA


_DECIMAL = frozenset("0123456789")
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")
# 0xffffffff needs at most 10 decimal, 11 octal or 8 hex significant digits; anything longer
# is out of range, and is refused before int() sees it (no huge-number work on hostile input).
_MAX_SIGNIFICANT_DIGITS = 11


def _parse_part(part: str) -> int | None:
    """One inet_aton part: decimal, octal (leading 0) or hex (0x/0X, at least one digit)."""
    if part[:2] in ("0x", "0X"):
        digits, base, alphabet = part[2:], 16, _HEX
    elif part.startswith("0"):
        digits, base, alphabet = part, 8, _OCTAL
    else:
        digits, base, alphabet = part, 10, _DECIMAL
    if not digits or not alphabet.issuperset(digits):
        return None
    if len(digits.lstrip("0")) > _MAX_SIGNIFICANT_DIGITS:
        return None
    return int(digits, base)


def parse_ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address `host` spells in any form inet_aton (glibc) accepts, else None.

    1 to 4 dot-separated parts; each part is decimal, octal (leading 0) or hex (0x); every part
    but the last is one byte, and the last fills the remaining bytes (`127.1` is 127.0.0.1,
    `2130706433` too). An empty part, a sign, whitespace, non-ASCII digits or a trailing dot
    make it not a literal: the caller strips one trailing dot first, as for names.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        parsed = _parse_part(part)
        if parsed is None:
            return None
        values.append(parsed)
    *leading, last = values
    if any(value > 0xFF for value in leading):
        return None
    last_bits = 8 * (4 - len(leading))
    if last >= 1 << last_bits:
        return None
    number = 0
    for value in leading:
        number = (number << 8) | value
    return ipaddress.IPv4Address((number << last_bits) | last)


def looks_numeric_host(host: str) -> bool:
    """True when the last label (trailing dots ignored) is all digits or 0x-hex.

    Such a host is an IPv4 literal or a mistake, never a name to resolve: when
    parse_ipv4_literal rejects it (`425.510.425.510`, `6425673729`, `0x`), it is invalid_url.
    """
    last = host.rstrip(".").rpartition(".")[2]
    if last[:2] in ("0x", "0X"):
        return _HEX.issuperset(last[2:])
    return bool(last) and _DECIMAL.issuperset(last)
