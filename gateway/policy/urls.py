"""The one URL parser: what it decides the scheme, host and port are is what a connection uses.

yarl splits the URL (the same splitter aiohttp will use); this module then validates every
component and rebuilds the URL around the normalised host, so the `Target.url` handed to the
outbound client carries exactly the host the policy decided on. There is no second parser.

Defined outcomes (each tested in tests/policy/test_urls.py):
- surrounding whitespace is stripped; any other control character, space in the authority,
  or backslash before the query is `invalid_url`;
- no scheme (`example.com/x`) or scheme-relative (`//example.com/x`) is `invalid_url`, with
  the fix in the message; schemes are case-insensitive;
- user info (`user:pass@host`) is `invalid_url`: credentials never travel in URLs the gateway
  fetches, and `a@b` forms are a classic confusion;
- the fragment is dropped (it is never sent);
- a port must be decimal digits, 1-65535; leading zeros are read as decimal (`:0080` is 80);
  an empty port (`host:/`) means the scheme's default;
- IPv4 hosts in any `inet_aton` spelling become dotted quads; a numeric-looking host that is
  not a valid address, an invalid bracketed IPv6 address or an IPv6 zone id is `invalid_url`.

Speed: the common shape (a `host[:digits]` authority) is split once by yarl's own splitter,
quoted by yarl's own quoters and built once; every other shape (user info, brackets, an odd
port) takes the general route, which asks yarl to parse the whole URL as it did before. Both
routes give the same outcome for every input (a property test keeps a frozen copy of the
general route as the reference).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

import yarl

from gateway.policy.addresses import IPAddress, looks_numeric_host, parse_ipv4_literal
from gateway.policy.hosts import HostError, map_host_text, normalize_name

try:
    # The very functions `yarl.URL(text)` and `URL.with_port` run; calling them directly skips
    # the four URL objects the general route builds. A yarl without them, or whose versions
    # disagree with the general route on a few samples at import, sends every URL that way.
    from yarl._parse import split_url as _split_url
    from yarl._path import normalize_path as _normalize_path
    from yarl._quoters import FRAGMENT_REQUOTER as _FRAGMENT_REQUOTER
    from yarl._quoters import PATH_REQUOTER as _PATH_REQUOTER
    from yarl._quoters import QUERY_REQUOTER as _QUERY_REQUOTER
    from yarl._url import _encode_host
    from yarl._url import from_parts_uncached as _url_from_parts
except ImportError:  # pragma: no cover - depends on the installed yarl
    _FAST_IMPORTS = False
else:
    _FAST_IMPORTS = True

MAX_URL_LENGTH = 8192
DEFAULT_PORTS = {"http": 80, "https": 443}
SUPPORTED_SCHEMES = frozenset(DEFAULT_PORTS)

_SCHEME_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_PORT_RE = re.compile(r"[0-9]*\Z")
# A dotted quad as inet_aton reads it in decimal: no leading zeros (those mean octal), each
# part 0-255. Its spelling is already the canonical one. ASCII digits only ([0-9], not \d).
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_DOTTED_QUAD_RE = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}\Z")
_MAX_PORT = 65535
# The last character of any host `looks_numeric_host` accepts (digits, hex, 0x, a dot).
_NUMERIC_TAIL = frozenset("0123456789abcdefABCDEFxX.")
# yarl 1.25's splitter indexes an empty string for an authority with brackets that ends in '@'
# (`http://[x]@`); that is refused like any other unparsable URL, never a crash.
_YARL_CRASHED = "the URL does not parse: misplaced '[', ']' or '@' in the authority"


class InvalidURLError(ValueError):
    """The URL cannot be parsed unambiguously; the message says what to fix."""


class UnsupportedSchemeError(InvalidURLError):
    """A syntactically fine URL whose scheme the gateway never speaks (ftp, file, data, …)."""

    def __init__(self, scheme: str) -> None:
        super().__init__(f"the gateway does not fetch {scheme!r} URLs")
        self.scheme = scheme


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed, normalised destination. `url` is what the outbound client connects to."""

    url: yarl.URL
    scheme: str
    host: str  # A-label name, dotted-quad IPv4, or compressed IPv6 without brackets
    port: int
    ip: IPAddress | None = None  # set when the host is an IP literal

    @property
    def is_ip_literal(self) -> bool:
        return self.ip is not None

    def __str__(self) -> str:
        return str(self.url)


def parse_url(raw: object) -> Target:
    """Parse an absolute http(s) URL; InvalidURLError (or UnsupportedSchemeError) otherwise."""
    if type(raw) is str and len(raw) <= MAX_CACHED_URL:
        return _parse_cached(raw)
    return _parse(raw)


# The parse is pure and its result immutable, and agents ask for the same URLs again (an
# API's endpoints, a package index): the last few parses of short URLs are kept. Bounded in
# count and length; a URL that fails to parse is not kept and pays the parse every time.
MAX_CACHED_URL = 512


@functools.lru_cache(maxsize=1024)
def _parse_cached(raw: str) -> Target:
    return _parse(raw)


def _parse(raw: object) -> Target:
    text, scheme = _checked_text(raw)
    if not text.isascii():
        text = _map_authority(text)
    if FAST_ROUTE:
        return _parse_common(text, scheme)
    return _parse_general(text, scheme)  # pragma: no cover - depends on the installed yarl


def _parse_common(text: str, scheme: str) -> Target:
    """The fast route for `host[:digits]` authorities; hands any other shape to the general."""
    try:
        _, authority, path, query, fragment = _split_url(text)
    except (ValueError, TypeError) as exc:
        raise InvalidURLError(f"the URL does not parse: {exc}") from None
    except IndexError:
        raise InvalidURLError(_YARL_CRASHED) from None
    host_text, _, port_text = authority.partition(":")
    # Anything but `host[:digits]` goes the general way: user info, brackets and yarl's own
    # port errors all come from there, in its order.
    if (
        not host_text
        or "@" in authority
        or "[" in authority
        or (port_text and not (port_text.isascii() and port_text.isdigit()))
        # A long port (even 0000080) is left to yarl, whose int() refuses thousands of digits.
        or len(port_text) > 5
    ):
        return _parse_general(text, scheme)
    port = int(port_text) if port_text else DEFAULT_PORTS[scheme]
    if port > _MAX_PORT:
        return _parse_general(text, scheme)
    try:
        # What yarl.URL(text) does to these parts, in its order (its errors come first).
        if not host_text.isascii():
            # yarl refuses some non-ASCII names (invisible code points, IDNA failures) itself.
            _encode_host(host_text, validate_host=False)
        if path:
            path = _PATH_REQUOTER(path)
            if "." in path:
                path = _normalize_path(path)
        if query:
            query = _QUERY_REQUOTER(query)
        if fragment:
            _FRAGMENT_REQUOTER(fragment)  # dropped, but a fragment yarl cannot quote is refused
    except (ValueError, TypeError) as exc:
        raise InvalidURLError(f"the URL does not parse: {exc}") from None
    if " " in authority:
        raise InvalidURLError("the URL's host contains a space")
    if port < 1:
        raise InvalidURLError(f"the port {port} is out of range (1-65535)")
    host, ip = parse_host(host_text)
    # The URL with_fragment(None).with_host(host).with_port(...) makes: the host is ours, already
    # in yarl's encoding (an A-label name or a dotted quad), the default port left out.
    netloc = host if port == DEFAULT_PORTS[scheme] else f"{host}:{port}"
    final = _url_from_parts(scheme, netloc, path, query, "")
    return Target(url=final, scheme=scheme, host=host, port=port, ip=ip)


def _checked_text(raw: object) -> tuple[str, str]:
    """The stripped text and its lower-case scheme, after the checks both routes share."""
    if not isinstance(raw, str):
        raise InvalidURLError("the URL must be a string")
    text = raw.strip(" \t\r\n\f\v")
    if not text:
        raise InvalidURLError("the URL is empty")
    if len(text) > MAX_URL_LENGTH:
        raise InvalidURLError(f"the URL is longer than {MAX_URL_LENGTH} characters")
    # For ASCII text, "printable" is exactly "no control character"; the regex is for the rest.
    if not (text.isascii() and text.isprintable()) and _CONTROL_RE.search(text):
        raise InvalidURLError("the URL contains control characters")
    if text.startswith("https://"):  # the usual spellings, without the regex
        scheme, end = "https", 6
    elif text.startswith("http://"):
        scheme, end = "http", 5
    else:
        scheme_match = _SCHEME_RE.match(text)
        if text.startswith("//"):
            raise InvalidURLError(f"the URL has no scheme; write 'https:{text}'")
        if scheme_match is None:
            raise InvalidURLError(f"the URL has no scheme; write 'https://{text}'")
        scheme = scheme_match.group(1).lower()
        if scheme not in SUPPORTED_SCHEMES:
            raise UnsupportedSchemeError(scheme)
        end = scheme_match.end()
        if not text.startswith("//", end):
            raise InvalidURLError(f"an {scheme} URL needs '//' and a host after '{scheme}:'")
    if "\\" in text:
        query_at = text.find("?", end)
        if "\\" in (text[end:] if query_at == -1 else text[end:query_at]):
            raise InvalidURLError("the URL contains a backslash before the query")
    return text, scheme


# Where an authority ends, as yarl's (and the URL standard's) splitter sees it; a backslash
# before the query was refused already.
_AUTHORITY_END_RE = re.compile(r"[/?#]")


def _map_authority(text: str) -> str:
    """The URL with its authority mapped by UTS 46, once, before anything reads the host.

    The authority is delimited first, on ASCII delimiters only (as yarl and the URL standard
    split it); its mapped form is then what every later step parses, so a host spelled in
    fullwidth digits or ideographic full stops is decided, and dialled, as the literal it maps
    to, and the port delimiter may be spelled the same way. A mapping that yields a delimiter
    the split did not see (`/`, `?`, `#`, `\\`) is refused rather than re-split.
    """
    start = text.index("//") + 2  # _checked_text made sure the scheme is followed by '//'
    found = _AUTHORITY_END_RE.search(text, start)
    end = found.start() if found else len(text)
    authority = text[start:end]
    if authority.isascii():
        return text
    try:
        mapped = map_host_text(authority)
    except HostError as exc:
        raise InvalidURLError(f"invalid host {authority[:100]!r}: {exc}") from None
    if any(ch in mapped for ch in "/?#\\"):
        raise InvalidURLError(
            f"the host {authority[:100]!r} maps (UTS 46) to a URL delimiter: {mapped[:100]!r}"
        )
    return text[:start] + mapped + text[end:]


def _parse_general(text: str, scheme: str) -> Target:
    """Every URL shape: yarl parses the whole URL, then the host is swapped for ours."""
    try:
        raw_parts = yarl.URL(text, encoded=True)
        url = yarl.URL(text)
    except (ValueError, TypeError) as exc:
        raise InvalidURLError(f"the URL does not parse: {exc}") from None
    except IndexError:
        raise InvalidURLError(_YARL_CRASHED) from None
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
    if not _PORT_RE.match(port_text):
        raise InvalidURLError(f"the port {port_text!r} is not a decimal number")
    port = int(port_text) if port_text else DEFAULT_PORTS[scheme]
    if not 1 <= port <= _MAX_PORT:
        raise InvalidURLError(f"the port {port} is out of range (1-65535)")
    host, ip = parse_host(host_text, bracketed=authority.startswith("["))
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


def parse_host(text: str, *, bracketed: bool = False) -> tuple[str, IPAddress | None]:
    """A host as written -> (normalised host, IP address when it is a literal).

    A host that is not ASCII is mapped by UTS 46 first, and the literal rules below read the
    mapped form: what decides whether a host is an address is the host as it will be dialled.
    """
    if not text.isascii():
        try:
            text = map_host_text(text)
        except HostError as exc:
            raise InvalidURLError(f"invalid host {text[:100]!r}: {exc}") from None
    if bracketed or ":" in text:
        if "%" in text:
            raise InvalidURLError("IPv6 zone identifiers are not allowed in URLs")
        try:
            ip6 = ipaddress.IPv6Address(text)
        except ValueError:
            raise InvalidURLError(f"{text!r} is not a valid IPv6 address") from None
        return ip6.compressed, ip6
    name = text[:-1] if text.endswith(".") else text
    # Most names end in a letter no number can end in: straight to name normalisation.
    if name[-1:] in _NUMERIC_TAIL:
        quad = _dotted_quad(name)
        if quad is not None:
            return name, quad
        if looks_numeric_host(name):
            ip4 = parse_ipv4_literal(name)
            if ip4 is None:
                raise InvalidURLError(f"{text!r} looks like an IPv4 address but is not a valid one")
            return str(ip4), ip4
    try:
        return normalize_name(text), None
    except HostError as exc:
        raise InvalidURLError(f"invalid host {text[:100]!r}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _dotted_quad(name: str) -> ipaddress.IPv4Address | None:
    """The address of a canonical dotted quad (`10.0.0.1`), else None; the common IP literal."""
    quad = _DOTTED_QUAD_RE.match(name)
    if quad is None:
        return None
    a, b, c, d = quad.groups()
    return ipaddress.IPv4Address(int(a) << 24 | int(b) << 16 | int(c) << 8 | int(d))


def resolve_reference(base: Target, location: str) -> str:
    """A redirect's Location (absolute or relative) as an absolute URL string, for `parse_url`."""
    if not isinstance(location, str) or _CONTROL_RE.search(location.strip()):
        raise InvalidURLError("the Location contains control characters")
    location = location.strip()
    if _SCHEME_RE.match(location) or "\\" in location.split("?", 1)[0]:
        return location
    try:
        return str(base.url.join(yarl.URL(location)))
    except ValueError as exc:
        raise InvalidURLError(f"the Location does not parse: {exc}") from None


# Samples of every step of the fast route (ports, dot segments, escapes, IDNA, an IP literal,
# an error); at import both routes must agree on all of them or the fast one stays unused.
_SELF_CHECK_URLS = (
    "https://Example.COM:8443/a/./b/../%7e%2F%zz?q=%2f+x y#frag",
    "http://10.0.0.1:80/x y",
    "http://0x7f.1/",
    "http://B\u00fccher.de./\u00e9?\u00fc",
    "https://example.com",
    "https://example.com:0443?x",
    "http://exa mple.com/",
    "http://example.com:0/",
)


def _fast_route_agrees() -> bool:
    for text in _SELF_CHECK_URLS:
        _, scheme = _checked_text(text)
        outcomes: list[object] = []
        for route in (_parse_common, _parse_general):
            try:
                target = route(text, scheme)
            except InvalidURLError as exc:
                outcomes.append(str(exc))
            except Exception:  # noqa: BLE001 - any surprise from yarl's internals disables them
                return False
            else:
                outcomes.append((target, str(target.url)))
        if outcomes[0] != outcomes[1]:
            return False
    return True


FAST_ROUTE = _FAST_IMPORTS and _fast_route_agrees()
