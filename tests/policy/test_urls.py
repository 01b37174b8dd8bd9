"""Every URL shape an agent or a redirect can send has one defined outcome."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

import pytest
import yarl
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy import urls
from gateway.policy.addresses import IPAddress, looks_numeric_host, parse_ipv4_literal
from gateway.policy.hosts import HostError, map_host_text, normalize_name
from gateway.policy.urls import (
    DEFAULT_PORTS,
    FAST_ROUTE,
    MAX_URL_LENGTH,
    SUPPORTED_SCHEMES,
    InvalidURLError,
    Target,
    UnsupportedSchemeError,
    parse_host,
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


# --- The fast route gives exactly what the general route gave ------------------------------
#
# `_reference_parse_url` is a frozen copy of parse_url as it was before the fast route (every
# URL parsed whole by yarl, twice, and rebuilt with with_fragment/with_host/with_port), and
# `_reference_parse_host` of parse_host before its dotted-quad and name-tail shortcuts. Kept
# here so that any change to parse_url or parse_host, or to the yarl internals they call, is
# checked against them: same URL object, same host, port and address, same error message.
# They deliberately duplicate urls.py's general route: do not import or merge them.

_REF_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_REF_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_REF_PORT_RE = re.compile(r"[0-9]*\Z")


def _reference_parse_url(raw: object) -> Target:
    if not isinstance(raw, str):
        raise InvalidURLError("the URL must be a string")
    text = raw.strip(" \t\r\n\f\v")
    if not text:
        raise InvalidURLError("the URL is empty")
    if len(text) > MAX_URL_LENGTH:
        raise InvalidURLError(f"the URL is longer than {MAX_URL_LENGTH} characters")
    if _REF_CONTROL_RE.search(text):
        raise InvalidURLError("the URL contains control characters")
    scheme_match = _REF_SCHEME_RE.match(text)
    if text.startswith("//"):
        raise InvalidURLError(f"the URL has no scheme; write 'https:{text}'")
    if scheme_match is None:
        raise InvalidURLError(f"the URL has no scheme; write 'https://{text}'")
    scheme = scheme_match.group(1).lower()
    if scheme not in SUPPORTED_SCHEMES:
        raise UnsupportedSchemeError(scheme)
    rest = text[scheme_match.end() :]
    if not rest.startswith("//"):
        raise InvalidURLError(f"an {scheme} URL needs '//' and a host after '{scheme}:'")
    before_query = rest.split("?", 1)[0]
    if "\\" in before_query:
        raise InvalidURLError("the URL contains a backslash before the query")
    try:
        raw_parts = yarl.URL(text, encoded=True)
        url = yarl.URL(text)
    except (ValueError, TypeError) as exc:
        raise InvalidURLError(f"the URL does not parse: {exc}") from None
    authority = raw_parts.raw_authority
    if raw_parts.raw_user is not None or "@" in authority:
        raise InvalidURLError("the URL carries user info ('user@'); remove it")
    host_text = raw_parts.raw_host
    if not host_text:
        raise InvalidURLError("the URL has no host")
    if " " in authority:
        raise InvalidURLError("the URL's host contains a space")
    port_text = authority.rpartition("]")[2] if authority.startswith("[") else authority
    port_text = port_text.rpartition(":")[2] if ":" in port_text else ""
    if not _REF_PORT_RE.match(port_text):
        raise InvalidURLError(f"the port {port_text!r} is not a decimal number")
    port = int(port_text) if port_text else DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise InvalidURLError(f"the port {port} is out of range (1-65535)")
    host, ip = _reference_parse_host(host_text, bracketed=authority.startswith("["))
    try:
        final = (
            url.with_fragment(None)
            .with_host(host)
            .with_port(None if port == DEFAULT_PORTS[scheme] else port)
        )
        if scheme != url.scheme:
            final = final.with_scheme(scheme)
    except ValueError as exc:
        raise InvalidURLError(f"the URL does not parse: {exc}") from None
    return Target(url=final, scheme=scheme, host=host, port=port, ip=ip)


def _reference_parse_host(text: str, *, bracketed: bool = False) -> tuple[str, IPAddress | None]:
    if bracketed or ":" in text:
        if "%" in text:
            raise InvalidURLError("IPv6 zone identifiers are not allowed in URLs")
        try:
            ip6 = ipaddress.IPv6Address(text)
        except ValueError:
            raise InvalidURLError(f"{text!r} is not a valid IPv6 address") from None
        return ip6.compressed, ip6
    name = text[:-1] if text.endswith(".") else text
    if looks_numeric_host(name):
        ip4 = parse_ipv4_literal(name)
        if ip4 is None:
            raise InvalidURLError(f"{text!r} looks like an IPv4 address but is not a valid one")
        return str(ip4), ip4
    try:
        return normalize_name(text), None
    except HostError as exc:
        raise InvalidURLError(f"invalid host {text[:100]!r}: {exc}") from None


def _outcome(parse: Callable[[object], Target], raw: str) -> tuple[object, ...]:
    """Everything a caller can observe: the error (class and message) or the target, including
    the parts of the URL object aiohttp reads to connect."""
    try:
        target = parse(raw)
    except InvalidURLError as exc:
        return ("error", type(exc), str(exc))
    except Exception as exc:  # noqa: BLE001 - the reference crashes on some input (below)
        return ("crash", type(exc))
    url = target.url
    return (
        "target",
        str(url),
        url,
        target.scheme,
        target.host,
        target.port,
        target.ip,
        url.scheme,
        url.raw_host,  # not url.host: decoding a bad A-label (xn--a) raises, as yarl always did
        url.port,
        url.explicit_port,
        url.raw_path,
        url.raw_query_string,
        url.raw_fragment,
        url.raw_user,
    )


def _mapped_first(raw: object) -> object:
    """What the routes parse: the reference predates the UTS 46 mapping of a non-ASCII
    authority, which now comes first (`urls._map_authority`) and feeds both routes; the routes
    must then agree with the reference on the mapped text."""
    if not isinstance(raw, str) or raw.isascii():
        return raw
    try:
        text, _ = urls._checked_text(raw)
        return urls._map_authority(text)
    except InvalidURLError:
        return raw  # parse_url refuses it before either route runs; checked below


def _assert_same_as_reference(raw: str) -> None:
    mapped = _mapped_first(raw)
    outcome, reference = _outcome(parse_url, raw), _outcome(_reference_parse_url, mapped)
    if mapped is raw and isinstance(raw, str) and not raw.isascii():
        # Refused by the mapping step (or never reached it); the reference may have accepted it.
        try:
            text, _ = urls._checked_text(raw)
            urls._map_authority(text)
        except InvalidURLError as exc:
            assert outcome == ("error", type(exc), str(exc)), raw[:300]
            return
    if reference[0] == "crash":
        # The one outcome that was allowed to change: yarl's IndexError escaped the old
        # parser; the new one refuses such a URL.
        assert outcome[:2] == ("error", InvalidURLError), raw[:300]
    else:
        assert outcome == reference, raw[:300]


def test_fast_route_is_in_use() -> None:
    # Without yarl's internals every URL takes the general route: still correct, but the
    # equivalence tests below would no longer exercise the fast one.
    assert FAST_ROUTE


def test_fast_route_is_refused_when_yarl_internals_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A yarl whose private URL builder behaved differently must leave the fast route unused.
    assert urls._fast_route_agrees()
    monkeypatch.setattr(
        urls, "_url_from_parts", lambda scheme, netloc, path, query, fragment: yarl.URL("http://x/")
    )
    assert not urls._fast_route_agrees()


EDGES = [
    ("name", "https://Example.COM/a/b?c=d"),
    ("no path", "http://example.com"),
    ("query without path", "http://example.com?x=1"),
    ("fragment without path", "http://example.com#f"),
    ("empty query", "http://example.com/?"),
    ("dot segments", "http://example.com/a/./b/../../../c/."),
    ("encoded dot segments", "http://example.com/a/%2e%2E/b/%2e"),
    ("percent escapes", "http://example.com/%41%zz%4/%e2%82%ac?q=%2B+%20&r=%"),
    ("non-ascii path", "http://example.com/caf\u00e9/\u20ac?q=\u00fc#\u00e9"),
    ("lone surrogate in path", "http://example.com/\ud800"),
    ("lone surrogate in query", "http://example.com/?\udfff"),
    ("lone surrogate in fragment", "http://example.com/#\ud800"),
    ("port", "http://example.com:8080"),
    ("default port", "https://example.com:443/"),
    ("other scheme's default port", "https://example.com:80/"),
    ("empty port", "http://example.com:/"),
    ("port zero", "http://example.com:0/"),
    ("port zeros only", "http://example.com:0000/"),
    ("port leading zeros", "http://example.com:000000000000000443/"),
    ("port 65535", "http://example.com:65535/"),
    ("port 65536", "http://example.com:65536/"),
    ("port huge", "http://example.com:" + "9" * 5000 + "/"),
    ("port huge with zeros", "http://example.com:" + "0" * 5000 + "80/"),
    ("two ports", "http://example.com:80:80/"),
    ("port sign", "http://example.com:+80/"),
    ("port unicode digits", "http://example.com:\u0668\u0660/"),
    ("empty host with port", "http://:80/"),
    ("empty authority", "http:///x"),
    ("space in host", "http://exa mple.com/"),
    ("space in host and bad port", "http://exa mple.com:x/"),
    ("space in path", "http://example.com/a b"),
    ("userinfo", "http://u:p@example.com/"),
    ("empty userinfo", "http://@example.com/"),
    ("dotted quad", "http://10.20.30.40/x"),
    ("dotted quad trailing dot", "http://10.20.30.40./x"),
    ("dotted quad leading zero", "http://10.020.30.40/"),
    ("dotted quad 256", "http://10.20.30.256/"),
    ("dotted quad with port", "http://8.8.8.8:8080/"),
    ("zero quad", "http://0.0.0.0/"),
    ("broadcast quad", "http://255.255.255.255/"),
    ("short IPv4", "http://127.1/"),
    ("hex IPv4", "http://0x7f.1/"),
    ("numeric name", "http://1.2.3.4.5/"),
    ("ipv6", "http://[::1]:8080/"),
    ("ipv6 zone", "http://[fe80::1%25eth0]/"),
    ("idna", "http://B\u00fccher.de/"),
    ("fullwidth dot", "http://example\uff0ecom/"),
    ("fullwidth solidus", "http://evil\uff0fexample.com/"),
    ("percent in host", "http://exa%41mple.com/"),
    ("star host", "http://*.example.com/"),
    ("brace host", "http://{a}.example.com/"),
    ("tilde host", "http://~a.example.com/"),
    ("uppercase scheme", "HTTP://EXAMPLE.COM:80/"),
    ("question mark host end", "http://example.com?/x"),
    ("backslash in query", "http://example.com/?a\\b"),
    ("hash in query", "http://example.com/?a#b?c"),
    ("brackets then at sign", "http://[x]@"),
    ("idna host", "http://B\u00fccher.de:8080/x"),
    ("idna host, unicode digit port", "http://b\u00fccher.de:\u0668\u0660/"),
    ("snowman", "http://\u2603.net/"),
    ("fullwidth letters", "http://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/"),
    ("zero width space", "http://ex\u200bample.com/"),
    ("combining mark first", "http://\u0300a.com/"),
    ("account of", "http://\u2100.com/"),
    ("ideographic space", "http://a\u3000b.com/"),
    ("rtl label", "http://\u05d0\u05d1.com/"),
    ("mixed rtl", "http://a\u05d0.com/"),
    ("ascii punycode", "http://xn--ls8h.la/"),
    ("bad punycode", "http://xn--a.com/"),
]


@pytest.mark.parametrize("raw", ["http://[x]@", "http://a[@b]@/", "https://[::1]@"])
def test_parse_url_refuses_what_crashes_yarl(raw: str) -> None:
    with pytest.raises(InvalidURLError, match="does not parse"):
        parse_url(raw)


@pytest.mark.parametrize("raw", [e[1] for e in EDGES], ids=[e[0] for e in EDGES])
def test_parse_url_same_as_reference_on_edges(raw: str) -> None:
    _assert_same_as_reference(raw)


_HOST_CHARS = st.sampled_from(
    list("abcxyzABCXYZ0123456789-_.")
    + list(" %*~!$&'()+,;=<>{}|^`\"@:[]/?#\\")
    + ["\u00df", "\u00fc", "\u00dc", "\u00ad", "\u200b", "\uff0e", "\uff41", "\u0131", "\u2100"]
)
_PATH_CHARS = st.sampled_from(
    list("abcXYZ0189-_.~/%?#:@!$&'()*+,;=[]{}|^` \"<>\\")
    + list("2e2E41ff")
    + ["\u00e9", "\u20ac", "\U0001f600", "\ud800", "\udfff", "\x7f"]
)


def _ipv4_spellings() -> st.SearchStrategy[str]:
    octet = st.one_of(
        st.integers(0, 255).map(str),
        st.integers(0, 999).map(str),
        st.integers(0, 255).map(lambda v: f"0{v:o}"),
        st.integers(0, 255).map(lambda v: f"0x{v:x}"),
        st.sampled_from(["", "00", "0", "1", "255", "256"]),
    )
    return st.lists(octet, min_size=1, max_size=5).map(".".join)


_HOSTS = st.one_of(
    st.lists(st.text(_HOST_CHARS, min_size=0, max_size=12), min_size=1, max_size=4).map(".".join),
    st.lists(
        st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-"), min_size=1, max_size=12),
        min_size=1,
        max_size=5,
    ).map(".".join),
    _ipv4_spellings(),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
    st.sampled_from(["[::g]", "[fe80::1%25eth0]", "[v1.x]", "[::1", "::1]", ""]),
)
_PORTS = st.one_of(
    st.just(""),
    st.integers(0, 70000).map(lambda p: f":{p}"),
    st.text(st.sampled_from(list("0123456789+-a: ")), max_size=7).map(lambda p: ":" + p),
)


@st.composite
def _urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "hTTps", "ftp", ""]))
    separator = draw(st.sampled_from(["://", "://", "://", ":/", ":", "//", ":///"]))
    user = draw(st.sampled_from(["", "", "", "user@", "u:p@", "@", "a%40b@"]))
    host = draw(_HOSTS)
    dot = draw(st.sampled_from(["", "", "."]))
    port = draw(_PORTS)
    path = draw(st.text(_PATH_CHARS, max_size=20))
    if path and draw(st.booleans()):
        path = "/" + path
    query = draw(st.one_of(st.just(""), st.text(_PATH_CHARS, max_size=15).map(lambda q: "?" + q)))
    fragment = draw(st.one_of(st.just(""), st.text(_PATH_CHARS, max_size=8).map(lambda f: "#" + f)))
    padding = draw(st.sampled_from(["", "", " ", "\t", "\n "]))
    return f"{padding}{scheme}{separator}{user}{host}{dot}{port}{path}{query}{fragment}{padding}"


@settings(max_examples=1000, deadline=None)
@given(_urls())
def test_parse_url_same_as_reference_on_generated_urls(raw: str) -> None:
    _assert_same_as_reference(raw)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_parse_url_same_as_reference_on_any_text_after_a_scheme(tail: str) -> None:
    _assert_same_as_reference("http://" + tail)
    _assert_same_as_reference("https://example.com/" + tail)


def _host_or_error(
    parse: Callable[[str], tuple[str, IPAddress | None]], text: str
) -> tuple[object, ...]:
    try:
        return ("host", *parse(text))
    except InvalidURLError as exc:
        return ("error", str(exc))


HOST_EDGES = [
    "example.com",
    "1.2.3.4",
    "1.2.3.4.",
    "1.2.3.4..",
    "01.2.3.4",
    "1.2.3.256",
    "255.255.255.255",
    "0.0.0.0",
    "0x7f.1",
    "0x",
    "a.0x10",
    "a.de",
    "cafe",
    "beef.",
    "x.",
    ".",
    "..",
    "",
    "::1",
    "\u0661.\u0662.\u0663.\u0664",
    "1.2.3.4:80",
]


def _assert_host_same_as_reference(text: str) -> None:
    """The reference predates the UTS 46 mapping that now comes first for a non-ASCII host;
    it must agree with parse_host on the mapped text, and a host the mapping refuses is
    refused with the mapping's reason."""
    if text.isascii():
        assert _host_or_error(parse_host, text) == _host_or_error(_reference_parse_host, text)
        return
    try:
        mapped = map_host_text(text)
    except HostError as exc:
        assert _host_or_error(parse_host, text) == ("error", f"invalid host {text[:100]!r}: {exc}")
        return
    assert _host_or_error(parse_host, text) == _host_or_error(_reference_parse_host, mapped)


@pytest.mark.parametrize("text", HOST_EDGES)
def test_parse_host_same_as_reference_on_edges(text: str) -> None:
    _assert_host_same_as_reference(text)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_HOSTS, _ipv4_spellings().map(lambda h: h + "."), st.text(max_size=20)))
def test_parse_host_same_as_reference(text: str) -> None:
    _assert_host_same_as_reference(text)


def test_a_short_url_is_parsed_once_and_a_bad_one_every_time() -> None:
    url = "http://cache-check.example.com/a?b=c"
    assert parse_url(url) is parse_url(url)
    assert parse_url(url) == urls._parse(url)
    long_url = "http://cache-check.example.com/" + "a" * urls.MAX_CACHED_URL
    assert parse_url(long_url) is not parse_url(long_url)  # long URLs are not kept
    for _ in range(2):
        with pytest.raises(InvalidURLError):
            parse_url("http://[bad/")
