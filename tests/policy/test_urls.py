"""Every URL shape an agent or a redirect can send has one defined outcome."""

from __future__ import annotations

import ipaddress

import pytest

from gateway.policy.urls import (
    InvalidURLError,
    UnsupportedSchemeError,
    parse_url,
    resolve_reference,
)

VALID = [
    ("plain", "https://example.com/x", "https://example.com/x", "example.com", 443),
    (
        "uppercase scheme and host",
        "HTTPS://EXAMPLE.COM/X",
        "https://example.com/X",
        "example.com",
        443,
    ),
    ("trailing dot", "http://example.com./", "http://example.com/", "example.com", 80),
    ("fragment dropped", "https://example.com/a#frag", "https://example.com/a", "example.com", 443),
    (
        "default port removed",
        "https://example.com:443/",
        "https://example.com/",
        "example.com",
        443,
    ),
    (
        "leading zeros read as decimal",
        "http://example.com:0080/",
        "http://example.com/",
        "example.com",
        80,
    ),
    ("empty port is default", "http://example.com:/", "http://example.com/", "example.com", 80),
    (
        "explicit port kept",
        "http://example.com:8080/",
        "http://example.com:8080/",
        "example.com",
        8080,
    ),
    (
        "surrounding whitespace",
        "  https://example.com/  ",
        "https://example.com/",
        "example.com",
        443,
    ),
    ("idna", "https://faß.de/", "https://xn--fa-hia.de/", "xn--fa-hia.de", 443),
    ("idna uppercase", "https://BÜCHER.de/", "https://xn--bcher-kva.de/", "xn--bcher-kva.de", 443),
    ("path quoted", "https://example.com/a b", "https://example.com/a%20b", "example.com", 443),
    (
        "query quoted",
        "https://example.com/?q=<x>",
        "https://example.com/?q=%3Cx%3E",
        "example.com",
        443,
    ),
    (
        "underscore label",
        "https://_dmarc.example.com/",
        "https://_dmarc.example.com/",
        "_dmarc.example.com",
        443,
    ),
    (
        "backslash in query",
        "https://example.com/?q=a\\b",
        "https://example.com/?q=a%5Cb",
        "example.com",
        443,
    ),
]


@pytest.mark.parametrize(
    ("raw", "url", "host", "port"), [v[1:] for v in VALID], ids=[v[0] for v in VALID]
)
def test_parse_url_valid(raw: str, url: str, host: str, port: int) -> None:
    target = parse_url(raw)
    assert str(target.url) == url
    assert target.host == host
    assert target.port == port
    assert target.url.host == host or target.url.raw_host == host
    assert target.ip is None


IP_LITERALS = [
    ("dotted", "http://127.0.0.1/", "127.0.0.1"),
    ("short", "http://127.1/", "127.0.0.1"),
    ("hex part", "http://0x7f.0.0.1/", "127.0.0.1"),
    ("dotless decimal", "http://2130706433/", "127.0.0.1"),
    ("dotless octal", "http://017700000001/", "127.0.0.1"),
    ("dotless hex", "http://0x7f000001/", "127.0.0.1"),
    ("metadata decimal", "http://2852039166/", "169.254.169.254"),
    ("trailing dot", "http://10.0.0.1./", "10.0.0.1"),
    ("ipv6", "http://[::1]/", "::1"),
    ("ipv6 mapped", "http://[::ffff:127.0.0.1]/", "::ffff:7f00:1"),
    ("ipv6 upper", "http://[FE80::1]/", "fe80::1"),
]


@pytest.mark.parametrize(
    ("raw", "ip"), [v[1:] for v in IP_LITERALS], ids=[v[0] for v in IP_LITERALS]
)
def test_parse_url_ip_literals_become_canonical(raw: str, ip: str) -> None:
    target = parse_url(raw)
    assert target.ip == ipaddress.ip_address(ip)
    assert target.host == ip
    # The URL the connection uses carries the canonical address, never the odd spelling.
    assert target.url.raw_host == ip


INVALID = [
    ("no scheme", "example.com/x", "no scheme"),
    ("scheme relative", "//example.com/x", "no scheme"),
    ("no slashes", "http:example.com", "needs '//'"),
    ("no host", "http:///x", "no host"),
    ("userinfo", "http://user:pass@example.com/", "user info"),
    ("userinfo confusion", "http://example.com@evil.com/", "user info"),
    ("backslash in authority", "http://evil.com\\@good.com/", "backslash"),
    ("backslash in path", "http://good.com\\..\\x", "backslash"),
    ("port sign", "http://example.com:+80/", "decimal"),
    ("port out of range", "http://example.com:70000/", "out of range"),
    ("port zero", "http://example.com:0/", "out of range"),
    ("port letters", "http://example.com:80a/", "port"),
    ("control char", "http://exa\x00mple.com/", "control"),
    ("newline inside", "http://example.com/a\nb", "control"),
    ("space in host", "http://exa mple.com/", "space"),
    ("percent in host", "http://exa%41mple.com/", "invalid host"),
    ("empty label", "http://a..example.com/", "empty label"),
    ("long label", "http://" + "a" * 64 + ".com/", "longer than 63"),
    ("long name", "http://" + ".".join(["a" * 60] * 5) + "/", "longer than 253"),
    ("soft hyphen", "http://exa\u00admple.com/", ""),
    ("zero width space", "http://exa\u200bmple.com/", ""),
    ("bad numeric", "http://425.510.425.510/", "not a valid one"),
    ("too large dotless", "http://6425673729/", "not a valid one"),
    ("bad ipv6", "http://[::g]/", "IPv6"),
    ("ipv6 zone", "http://[fe80::1%25eth0]/", ""),
    ("star host", "http://*.example.com/", ""),
    ("empty", "   ", "empty"),
    ("too long", "http://example.com/" + "a" * 9000, "longer than"),
]


@pytest.mark.parametrize(("raw", "fragment"), [v[1:] for v in INVALID], ids=[v[0] for v in INVALID])
def test_parse_url_invalid(raw: str, fragment: str) -> None:
    with pytest.raises(InvalidURLError) as info:
        parse_url(raw)
    assert not isinstance(info.value, UnsupportedSchemeError)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "raw",
    [
        "ftp://example.com/",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "data:text/plain,x",
        "gopher://x/",
    ],
)
def test_parse_url_other_schemes_are_unsupported(raw: str) -> None:
    with pytest.raises(UnsupportedSchemeError):
        parse_url(raw)


def test_parse_url_rejects_non_strings() -> None:
    with pytest.raises(InvalidURLError):
        parse_url(None)


RELATIVE = [
    ("absolute", "https://other.com/x", "https://other.com/x"),
    ("path", "/b/c?d=1", "https://example.com/b/c?d=1"),
    ("relative path", "c", "https://example.com/a/c"),
    ("dot segments", "../up", "https://example.com/up"),
    ("scheme relative", "//other.com/z", "https://other.com/z"),
    ("query only", "?q=2", "https://example.com/a/b?q=2"),
]


@pytest.mark.parametrize(
    ("location", "expected"), [v[1:] for v in RELATIVE], ids=[v[0] for v in RELATIVE]
)
def test_resolve_reference(location: str, expected: str) -> None:
    base = parse_url("https://example.com/a/b")
    assert str(parse_url(resolve_reference(base, location)).url) == expected
