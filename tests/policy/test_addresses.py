"""The address classifier: every blocked range, metadata endpoint and IPv6 embedding, and
inet_aton-style IPv4 literals, as tables with ids plus hypothesis properties."""

from __future__ import annotations

import ipaddress
import platform
import socket
from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.policy.addresses import (
    BLOCKED_IPV4,
    BLOCKED_IPV6,
    EMBEDDINGS,
    METADATA_RANGES,
    AddressClass,
    AddressKind,
    classify_address,
    embedded_ipv4,
    is_metadata_address,
    looks_numeric_host,
    mapped_ipv4_network,
    metadata_range_holding,
    parse_ipv4_literal,
)

PUBLIC = AddressKind.PUBLIC
PRIVATE = AddressKind.PRIVATE
METADATA = AddressKind.METADATA

# (address, kind, blocking network); `None` network for public addresses.
CLASSIFY_CASES: list[tuple[str, AddressKind, str | None]] = [
    # IPv4, each range with an address inside and its neighbours outside.
    ("0.0.0.0", PRIVATE, "0.0.0.0/8"),
    ("0.1.2.3", PRIVATE, "0.0.0.0/8"),
    ("0.255.255.255", PRIVATE, "0.0.0.0/8"),
    ("1.0.0.0", PUBLIC, None),
    ("9.255.255.255", PUBLIC, None),
    ("10.0.0.0", PRIVATE, "10.0.0.0/8"),
    ("10.255.255.255", PRIVATE, "10.0.0.0/8"),
    ("11.0.0.0", PUBLIC, None),
    ("100.63.255.255", PUBLIC, None),
    ("100.64.0.0", PRIVATE, "100.64.0.0/10"),
    ("100.127.255.255", PRIVATE, "100.64.0.0/10"),
    ("100.128.0.0", PUBLIC, None),
    ("126.255.255.255", PUBLIC, None),
    ("127.0.0.1", PRIVATE, "127.0.0.0/8"),
    ("127.255.255.255", PRIVATE, "127.0.0.0/8"),
    ("128.0.0.0", PUBLIC, None),
    ("169.253.255.255", PUBLIC, None),
    ("169.255.0.0", PUBLIC, None),
    ("172.15.255.255", PUBLIC, None),
    ("172.16.0.0", PRIVATE, "172.16.0.0/12"),
    ("172.31.255.255", PRIVATE, "172.16.0.0/12"),
    ("172.32.0.0", PUBLIC, None),
    ("192.0.0.1", PRIVATE, "192.0.0.0/24"),
    ("192.0.0.255", PRIVATE, "192.0.0.0/24"),
    ("192.0.1.0", PUBLIC, None),
    ("192.0.2.1", PRIVATE, "192.0.2.0/24"),
    ("192.0.3.0", PUBLIC, None),
    ("192.31.196.1", PRIVATE, "192.31.196.0/24"),
    ("192.52.193.1", PRIVATE, "192.52.193.0/24"),
    ("192.88.99.1", PRIVATE, "192.88.99.0/24"),
    ("192.88.100.0", PUBLIC, None),
    ("192.167.255.255", PUBLIC, None),
    ("192.168.0.1", PRIVATE, "192.168.0.0/16"),
    ("192.168.255.255", PRIVATE, "192.168.0.0/16"),
    ("192.169.0.0", PUBLIC, None),
    ("192.175.48.1", PRIVATE, "192.175.48.0/24"),
    ("198.17.255.255", PUBLIC, None),
    ("198.18.0.0", PRIVATE, "198.18.0.0/15"),
    ("198.19.255.255", PRIVATE, "198.18.0.0/15"),
    ("198.20.0.0", PUBLIC, None),
    ("198.51.100.7", PRIVATE, "198.51.100.0/24"),
    ("203.0.113.9", PRIVATE, "203.0.113.0/24"),
    ("223.255.255.255", PUBLIC, None),
    ("224.0.0.1", PRIVATE, "224.0.0.0/4"),
    ("239.255.255.255", PRIVATE, "224.0.0.0/4"),
    ("240.0.0.1", PRIVATE, "240.0.0.0/4"),
    ("255.255.255.255", PRIVATE, "240.0.0.0/4"),
    ("8.8.8.8", PUBLIC, None),
    ("1.1.1.1", PUBLIC, None),
    # Metadata endpoints win over the wider range around them.
    ("169.254.169.254", METADATA, "169.254.0.0/16"),
    ("169.254.170.2", METADATA, "169.254.0.0/16"),
    ("169.254.0.0", METADATA, "169.254.0.0/16"),
    ("169.254.255.255", METADATA, "169.254.0.0/16"),
    ("168.63.129.16", METADATA, "168.63.129.16/32"),
    ("168.63.129.15", PUBLIC, None),
    ("168.63.129.17", PUBLIC, None),
    ("100.100.100.200", METADATA, "100.100.100.200/32"),
    ("100.100.100.201", PRIVATE, "100.64.0.0/10"),
    ("192.0.0.192", METADATA, "192.0.0.192/32"),
    ("192.0.0.193", PRIVATE, "192.0.0.0/24"),
    ("fd00:ec2::254", METADATA, "fd00:ec2::254/128"),
    ("fd00:ec2::253", PRIVATE, "fc00::/7"),
    # IPv6 ranges.
    ("::", PRIVATE, "::/128"),
    ("::1", PRIVATE, "::1/128"),
    ("64:ff9b:1::a00:1", PRIVATE, "64:ff9b:1::/48"),
    ("64:ff9b:1::808:808", PRIVATE, "64:ff9b:1::/48"),
    ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", PRIVATE, "64:ff9b:1::/48"),
    ("64:ff9b:2::1", PUBLIC, None),
    ("64:ff9b:0:ffff::1", PUBLIC, None),
    ("64:ff9c::1", PUBLIC, None),
    ("100::1", PRIVATE, "100::/64"),
    ("100::ffff:ffff:ffff:ffff", PRIVATE, "100::/64"),
    ("100:0:0:1::", PUBLIC, None),
    ("2001:1::1", PRIVATE, "2001::/23"),
    ("2001:1ff:ffff::1", PRIVATE, "2001::/23"),
    ("2001:200::1", PUBLIC, None),
    ("2001:db8::1", PRIVATE, "2001:db8::/32"),
    ("2001:db9::1", PUBLIC, None),
    ("3fff::1", PRIVATE, "3fff::/20"),
    ("3fff:fff:ffff::1", PRIVATE, "3fff::/20"),
    ("3fff:1000::1", PUBLIC, None),
    ("5f00::1", PRIVATE, "5f00::/16"),
    ("5f01::1", PUBLIC, None),
    ("fc00::1", PRIVATE, "fc00::/7"),
    ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PRIVATE, "fc00::/7"),
    ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PUBLIC, None),
    ("fe80::1", PRIVATE, "fe80::/10"),
    ("fe80::1%eth0", PRIVATE, "fe80::/10"),
    ("febf:ffff::1", PRIVATE, "fe80::/10"),
    ("fec0::1", PRIVATE, "fec0::/10"),
    ("feff:ffff::1", PRIVATE, "fec0::/10"),
    ("ff02::1", PRIVATE, "ff00::/8"),
    ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", PRIVATE, "ff00::/8"),
    ("2606:4700::1111", PUBLIC, None),
    ("2001:4860:4860::8888", PUBLIC, None),
    # IPv6 forms embedding an IPv4 address: judged by the IPv4 address.
    ("::ffff:10.0.0.1", PRIVATE, "10.0.0.0/8"),
    ("::ffff:127.0.0.1", PRIVATE, "127.0.0.0/8"),
    ("::ffff:a9fe:a9fe", METADATA, "169.254.0.0/16"),
    ("::ffff:8.8.8.8", PUBLIC, None),
    ("::10.0.0.1", PRIVATE, "10.0.0.0/8"),
    ("::127.0.0.1", PRIVATE, "127.0.0.0/8"),
    ("::2", PRIVATE, "0.0.0.0/8"),
    ("::8.8.8.8", PUBLIC, None),
    ("::ffff:0:10.0.0.1", PRIVATE, "10.0.0.0/8"),
    ("::ffff:0:169.254.169.254", METADATA, "169.254.0.0/16"),
    ("::ffff:0:8.8.8.8", PUBLIC, None),
    ("64:ff9b::10.0.0.1", PRIVATE, "10.0.0.0/8"),
    ("64:ff9b::a9fe:a9fe", METADATA, "169.254.0.0/16"),
    ("64:ff9b::8.8.8.8", PUBLIC, None),
    ("2002:a00:1::1", PRIVATE, "10.0.0.0/8"),
    ("2002:7f00:1:ffff:ffff:ffff:ffff:ffff", PRIVATE, "127.0.0.0/8"),
    ("2002:a9fe:a9fe::1", METADATA, "169.254.0.0/16"),
    ("2002:808:808::1", PUBLIC, None),
    # Teredo: the client address is the last 32 bits inverted (RFC 4380's own example first).
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", PRIVATE, "192.0.2.0/24"),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", PRIVATE, "10.0.0.0/8"),
    ("2001:0:4136:e378:8000:63bf:5601:5601", METADATA, "169.254.0.0/16"),
    ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", PUBLIC, None),
    # Read raw, these bits would say 8.8.8.8; de-obfuscated they are 247.247.247.247.
    ("2001:0:4136:e378:8000:63bf:808:808", PRIVATE, "240.0.0.0/4"),
]


@pytest.mark.parametrize(("address", "kind", "network"), CLASSIFY_CASES, ids=lambda v: str(v))
def test_classify_address(address: str, kind: AddressKind, network: str | None) -> None:
    result = classify_address(ipaddress.ip_address(address))
    assert (result.kind, result.network) == (kind, network)
    assert (result.label is None) == (kind is PUBLIC)
    assert is_metadata_address(ipaddress.ip_address(address)) == (kind is METADATA)


def test_every_table_range_has_a_case() -> None:
    covered = {network for _, _, network in CLASSIFY_CASES}
    # 169.254.0.0/16 is also a BLOCKED_IPV4 row, but METADATA_RANGES always answers first.
    rows = (*METADATA_RANGES, *BLOCKED_IPV4, *BLOCKED_IPV6)
    assert {str(row.network) for row in rows} <= covered


def test_tables_are_exactly_the_contracts() -> None:
    assert [str(row.network) for row in BLOCKED_IPV4] == [
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
        "192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    ]  # fmt: skip
    assert [str(row.network) for row in BLOCKED_IPV6] == [
        "::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32",
        "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
    ]  # fmt: skip
    assert [str(row.network) for row in METADATA_RANGES] == [
        "169.254.0.0/16", "168.63.129.16/32", "100.100.100.200/32", "192.0.0.192/32",
        "fd00:ec2::254/128",
    ]  # fmt: skip
    assert [str(e.prefix) for e in EMBEDDINGS] == [
        "::ffff:0:0/96", "::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "2002::/16", "2001::/32",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.1", AddressClass(PRIVATE, "10.0.0.0/8", "private network (RFC 1918)")),
        (
            "::ffff:10.0.0.1",
            AddressClass(
                PRIVATE,
                "10.0.0.0/8",
                "IPv4-mapped IPv6 (::ffff:0:0/96, RFC 4291) of 10.0.0.1: "
                "private network (RFC 1918)",
            ),
        ),
        (
            "2001:0:4136:e378:8000:63bf:5601:5601",
            AddressClass(
                METADATA,
                "169.254.0.0/16",
                "Teredo (2001::/32, RFC 4380) of 169.254.169.254: "
                "cloud metadata endpoint (link-local, RFC 3927)",
            ),
        ),
        ("8.8.8.8", AddressClass(PUBLIC, None, None)),
    ],
    ids=["plain", "mapped", "teredo-metadata", "public"],
)
def test_labels(address: str, expected: AddressClass) -> None:
    assert classify_address(ipaddress.ip_address(address)) == expected


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ("169.254.169.254/32", "169.254.0.0/16"),
        ("169.254.0.0/16", "169.254.0.0/16"),
        ("169.254.0.0/15", None),  # 169.255/16 is not metadata
        ("100.100.100.200/32", "100.100.100.200/32"),
        ("100.100.100.0/24", None),
        ("fd00:ec2::254/128", "fd00:ec2::254/128"),
        ("fd00:ec2::/64", None),
        ("::ffff:a9fe:a9fe/128", "169.254.0.0/16"),
        ("::a9fe:0/112", "169.254.0.0/16"),  # IPv4-compatible
        ("64:ff9b::a83f:8110/128", "168.63.129.16/32"),  # NAT64
        ("2002:a9fe::/32", "169.254.0.0/16"),  # 6to4
        ("2002:a9fe::/31", None),
        ("2001:0:1:2:3:4:5601:5601/128", "169.254.0.0/16"),  # Teredo, client inverted
        ("::ffff:0:0/96", None),
        ("10.0.0.0/8", None),
    ],
    ids=lambda v: str(v),
)
def test_metadata_range_holding(network: str, expected: str | None) -> None:
    row = metadata_range_holding(ipaddress.ip_network(network))
    assert (None if row is None else str(row.network)) == expected


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ("::ffff:a14:0/112", "10.20.0.0/16"),
        ("::ffff:169.254.169.254/128", "169.254.169.254/32"),
        ("::ffff:0:0/96", "0.0.0.0/0"),
        ("::fffe:0:0/95", None),  # holds the mapped block, but names IPv6 space
        ("::/0", None),
        ("::a00:0/104", None),  # IPv4-compatible, not mapped
        ("64:ff9b::a00:0/104", None),  # NAT64 reaches a translator, not the IPv4 host
        ("::ffff:0:a00:0/104", None),  # SIIT
        ("2001:db8::/32", None),
    ],
    ids=lambda v: str(v),
)
def test_mapped_ipv4_network(network: str, expected: str | None) -> None:
    result = mapped_ipv4_network(ipaddress.IPv6Network(network))
    assert result == (None if expected is None else ipaddress.IPv4Network(expected))


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("::ffff:10.0.0.1", "10.0.0.1"),
        ("::10.0.0.1", "10.0.0.1"),
        ("::ffff:0:10.0.0.1", "10.0.0.1"),
        ("64:ff9b::10.0.0.1", "10.0.0.1"),
        ("2002:a00:1:2:3:4:5:6", "10.0.0.1"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.45"),
        ("::", None),
        ("::1", None),
        ("64:ff9b:1::a00:1", None),
        ("2001:db8::a00:1", None),
        ("2606:4700::1111", None),
    ],
    ids=lambda v: str(v),
)
def test_embedded_ipv4(address: str, expected: str | None) -> None:
    result = embedded_ipv4(ipaddress.IPv6Address(address))
    assert result == (None if expected is None else ipaddress.IPv4Address(expected))


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0X7F.0.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7f.0x0.0.01", "127.0.0.1"),
        ("2852039166", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("10.1", "10.0.0.1"),
        ("0", "0.0.0.0"),
        ("0.0", "0.0.0.0"),
        ("4294967295", "255.255.255.255"),
        ("0xffffffff", "255.255.255.255"),
        ("037777777777", "255.255.255.255"),
        ("255.16777215", "255.255.255.255"),
        ("255.255.65535", "255.255.255.255"),
        ("0" * 5000 + "1", "0.0.0.1"),
        ("0x" + "0" * 5000 + "1", "0.0.0.1"),
        # Not literals: the caller either resolves them as names or, when they look numeric,
        # refuses them as invalid_url.
        ("", None),
        (".", None),
        ("1..2", None),
        (".1.2.3", None),
        ("1.2.3.4.", None),
        ("1.2.3.4.5", None),
        ("256.0.0.1", None),
        ("1.256.0.1", None),
        ("1.2.256.1", None),
        ("1.2.3.256", None),
        ("1.2.65536", None),
        ("1.16777216", None),
        ("4294967296", None),
        ("6425673729", None),
        ("425.510.425.510", None),
        ("0x100000000", None),
        ("040000000000", None),
        ("08", None),
        ("09.1.1.1", None),
        ("0x", None),
        ("0xg", None),
        ("0x.1.2.3", None),
        ("1.2.3.-4", None),
        ("+1.2.3.4", None),
        (" 1.2.3.4", None),
        ("1.2.3.4 ", None),
        ("1_0.0.0.1", None),
        ("\uff11.2.3.4", None),  # fullwidth digit one
        ("\u0661\u0662\u0667.0.0.1", None),  # Arabic-Indic 127
        ("1" * 5000, None),
        ("example.com", None),
        ("1e3", None),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_parse_ipv4_literal(host: str, expected: str | None) -> None:
    result = parse_ipv4_literal(host)
    assert result == (None if expected is None else ipaddress.IPv4Address(expected))


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("1.2.3.4", True),
        ("127.1", True),
        ("0x7f000001", True),
        ("425.510.425.510", True),
        ("6425673729", True),
        ("example.123", True),
        ("0x", True),
        ("0xABC", True),
        ("1.2.3.4.", True),
        ("1.2.3.4..", True),
        ("example.com", False),
        ("123.example", False),
        ("0x1f.example", False),
        ("0xg", False),
        ("1e5", False),
        ("", False),
        (".", False),
        ("\u0663", False),  # Arabic-Indic three is not an ASCII digit
    ],
    ids=lambda v: repr(v),
)
def test_looks_numeric_host(host: str, expected: bool) -> None:
    assert looks_numeric_host(host) is expected


# --- properties -------------------------------------------------------------------------

_IPV4_ROWS = [row for row in (*METADATA_RANGES, *BLOCKED_IPV4) if row.network.version == 4]


@st.composite
def blocked_ipv4(draw: st.DrawFn) -> int:
    row = draw(st.sampled_from(_IPV4_ROWS))
    return draw(st.integers(row.first, row.last))


def _is_public(value: int) -> bool:
    return classify_address(ipaddress.IPv4Address(value)).kind is PUBLIC


public_ipv4 = st.integers(0, 2**32 - 1).filter(_is_public)


@st.composite
def spelled_part(draw: st.DrawFn, value: int) -> str:
    style = draw(st.sampled_from(["decimal", "octal", "hex"]))
    zeros = "0" * draw(st.integers(0, 3))
    if style == "decimal":
        return str(value)
    if style == "octal":
        return "0" + zeros + format(value, "o")
    digits = format(value, draw(st.sampled_from(["x", "X"])))
    return draw(st.sampled_from(["0x", "0X"])) + zeros + digits


@st.composite
def spelling(draw: st.DrawFn, value: int) -> str:
    """Any inet_aton spelling of `value`: 1 to 4 parts, each in its own base."""
    count = draw(st.integers(1, 4))
    last_bits = 8 * (5 - count)
    leading = [(value >> (32 - 8 * (i + 1))) & 0xFF for i in range(count - 1)]
    last = value & ((1 << last_bits) - 1)
    return ".".join([draw(spelled_part(part)) for part in (*leading, last)])


@given(st.data(), blocked_ipv4())
def test_any_spelling_of_a_blocked_ipv4_is_the_same_blocked_address(
    data: st.DataObject, value: int
) -> None:
    text = data.draw(spelling(value))
    parsed = parse_ipv4_literal(text)
    assert parsed == ipaddress.IPv4Address(value)
    assert looks_numeric_host(text)
    assert classify_address(parsed).kind is not PUBLIC


@given(st.data(), st.integers(0, 2**32 - 1))
def test_any_spelling_round_trips(data: st.DataObject, value: int) -> None:
    assert parse_ipv4_literal(data.draw(spelling(value))) == ipaddress.IPv4Address(value)


_FILLER_80 = st.integers(0, 2**80 - 1)
_FILLER_64 = st.integers(0, 2**64 - 1)


def _mapped(v4: int, _: int) -> int:
    return 0xFFFF << 32 | v4


def _compatible(v4: int, _: int) -> int:
    return v4


def _siit(v4: int, _: int) -> int:
    return 0xFFFF << 48 | v4


def _nat64(v4: int, _: int) -> int:
    return 0x64FF9B << 96 | v4


def _six_to_four(v4: int, filler: int) -> int:
    return 0x2002 << 112 | v4 << 80 | filler % 2**80


def _teredo(v4: int, filler: int) -> int:
    # Server address, flags and obfuscated port are free; the client is inverted.
    return 0x20010000 << 96 | (filler % 2**64) << 32 | (v4 ^ 0xFFFFFFFF)


EMBED: dict[str, Callable[[int, int], int]] = {
    "mapped": _mapped,
    "compatible": _compatible,
    "siit": _siit,
    "nat64": _nat64,
    "6to4": _six_to_four,
    "teredo": _teredo,
}


@given(blocked_ipv4(), st.sampled_from(sorted(EMBED)), _FILLER_80)
def test_every_ipv6_embedding_of_a_blocked_ipv4_is_blocked(
    v4: int, embedding: str, filler: int
) -> None:
    v6 = ipaddress.IPv6Address(EMBED[embedding](v4, filler))
    inner = classify_address(ipaddress.IPv4Address(v4))
    result = classify_address(v6)
    if embedding == "compatible" and v4 in (0, 1):
        # :: and ::1 are their own entries, blocked in their own right.
        assert result.kind is PRIVATE
        return
    assert (result.kind, result.network) == (inner.kind, inner.network)
    assert embedded_ipv4(v6) == ipaddress.IPv4Address(v4)


@given(public_ipv4, st.sampled_from(sorted(EMBED)), _FILLER_80)
@example(0x08080808, "mapped", 0)
@example(0x01010101, "teredo", 0)
@example(0x01010101, "6to4", 0)
def test_public_ipv4_is_public_in_every_embedding(v4: int, embedding: str, filler: int) -> None:
    v6 = ipaddress.IPv6Address(EMBED[embedding](v4, filler))
    assert classify_address(v6) == AddressClass(PUBLIC, None, None)
    assert embedded_ipv4(v6) == ipaddress.IPv4Address(v4)


@given(public_ipv4, st.integers(0, 2**48 - 1))
@example(0x08080808, 0)
def test_local_use_nat64_is_blocked_whatever_it_carries(v4: int, filler: int) -> None:
    v6 = ipaddress.IPv6Address(0x64FF9B0001 << 80 | filler << 32 | v4)
    assert classify_address(v6).network == "64:ff9b:1::/48"
    assert embedded_ipv4(v6) is None


@given(st.text(max_size=60))
@example("0x7f.1")
def test_parse_never_raises_and_every_literal_looks_numeric(host: str) -> None:
    parsed = parse_ipv4_literal(host)
    if parsed is not None:
        assert looks_numeric_host(host)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's inet_aton is the oracle")
@given(st.text(alphabet="0123456789abcdefxX.", max_size=24))
@example("0x")
@example("0x7f.1")
def test_agrees_with_glibc_inet_aton(host: str) -> None:
    try:
        expected: ipaddress.IPv4Address | None = ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        expected = None
    assert parse_ipv4_literal(host) == expected
