"""Host names: normalisation, the three pattern forms, lookup by label, public suffixes.

Policy patterns and request hosts go through the same `normalize_name`, so a pattern and a
host can only match when they are the same A-label string. Pure: no DNS, no network; the
public-suffix list is tldextract's bundled snapshot, never fetched.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import idna

MAX_NAME_LENGTH = 253
MAX_LABEL_LENGTH = 63

_LABEL_RE = re.compile(r"[a-z0-9_-]+\Z")
# A name that normalises to itself lower-cased (one trailing dot allowed): 1-63 ASCII letter,
# digit, '-' or '_' per label and at most 253 characters without the dot (the lookahead).
_PLAIN_NAME_RE = re.compile(
    r"(?=[A-Za-z0-9_.-]{1,253}\.?\Z)[A-Za-z0-9_-]{1,63}(?:\.[A-Za-z0-9_-]{1,63})*\.?\Z"
)
# Characters that are never part of a host name; rejected before any IDNA processing so
# that UTS 46 mapping can never turn them into something that looks valid.
_FORBIDDEN_RE = re.compile(r"[\x00-\x20\x7f%\\/?#@:\[\]<>\"'`{}|^]")


class HostError(ValueError):
    """A host name that cannot be normalised; the message says why."""


class PatternError(ValueError):
    """A host pattern that is malformed or too broad; `code` is the loader's issue code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _is_invisible(ch: str) -> bool:
    # Format (Cf) code points include soft hyphen, ZWSP, ZWJ, bidi controls and the tag
    # block; the rest of Default_Ignorable_Code_Point is listed explicitly (with the
    # variation selectors, every code point UTS 46 would silently delete).
    return (
        unicodedata.category(ch) == "Cf"
        or ch in "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u3164\uffa0"
        or "\ufe00" <= ch <= "\ufe0f"
        or "\U000e0100" <= ch <= "\U000e01ef"
    )


def map_host_text(raw: str) -> str:
    """UTS 46 mapping (non-transitional, no STD3 rules yet) of a host or authority as written.

    The first step of reading any host that is not ASCII, before anything else looks at it:
    `１２７.０.０.１` and `127。0。0。1` become `127.0.0.1`, which the caller then reads as
    the IPv4 literal it is, so the host decided is the host dialled. Code points that the
    mapping would silently delete (soft hyphen, zero-width space, variation selectors),
    controls and spaces make the host invalid instead; HostError says which.
    """
    if raw.isascii():
        return raw
    if len(raw) > 4 * MAX_NAME_LENGTH:
        raise HostError("host name too long")
    for ch in raw:
        if ch.isascii():
            continue
        if _is_invisible(ch):
            raise HostError(f"host contains the invisible code point U+{ord(ch):04X}")
        category = unicodedata.category(ch)
        # Unassigned (Cn) in this Python's Unicode may be assigned in the idna package's
        # newer tables: its UTS 46 status, not Python's age, decides (disallowed raises).
        if category != "Cn" and category.startswith(("C", "Z")):
            raise HostError(f"host contains the control or space code point U+{ord(ch):04X}")
    try:
        return idna.uts46_remap(raw, std3_rules=False)
    except (idna.IDNAError, UnicodeError) as exc:
        raise HostError(f"host is not a valid internationalised name: {exc}") from None


@functools.lru_cache(maxsize=65536)
def normalize_name(raw: str) -> str:
    """Lower case, one trailing dot removed, UTS 46 non-transitional A-labels; or HostError.

    Only for names: IP literals are recognised by the caller first (`urls.parse_host`).
    """
    if _PLAIN_NAME_RE.match(raw):
        # Already an A-label name in letters, digits, '-' and '_': the checks below would
        # find nothing to refuse and nothing to map.
        host = raw.lower()
        return host[:-1] if host.endswith(".") else host
    if not raw:
        raise HostError("empty host")
    if len(raw) > 4 * MAX_NAME_LENGTH:
        raise HostError("host name too long")
    bad = _FORBIDDEN_RE.search(raw)
    if bad:
        raise HostError(f"host contains the forbidden character {bad.group()!r}")
    host = raw[:-1] if raw.endswith(".") else raw
    if not host.isascii():
        for ch in host:
            if _is_invisible(ch):
                raise HostError(f"host contains the invisible code point U+{ord(ch):04X}")
            if unicodedata.category(ch).startswith(("C", "Z")):
                raise HostError(f"host contains the control or space code point U+{ord(ch):04X}")
        try:
            host = idna.encode(host, uts46=True, transitional=False).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise HostError(f"host is not a valid internationalised name: {exc}") from None
    host = host.lower()
    if len(host) > MAX_NAME_LENGTH:
        raise HostError(f"host name longer than {MAX_NAME_LENGTH} characters")
    for label in host.split("."):
        if not label:
            raise HostError("host has an empty label")
        if len(label) > MAX_LABEL_LENGTH:
            raise HostError(f"host label longer than {MAX_LABEL_LENGTH} characters")
        if not _LABEL_RE.match(label):
            raise HostError(
                f"host label {label!r} has characters other than letters, digits, '-' and '_'"
            )
    return host


class PatternKind(StrEnum):
    EXACT = "exact"  # example.com
    SUBDOMAINS = "subdomains"  # *.example.com: any depth, not example.com itself
    DOMAIN_AND_SUBDOMAINS = "domain_and_subdomains"  # .example.com


@dataclass(frozen=True, slots=True)
class HostPattern:
    kind: PatternKind
    domain: str  # normalised
    text: str  # as written

    def matches(self, host: str) -> bool:
        if self.kind is PatternKind.EXACT:
            return host == self.domain
        if host.endswith("." + self.domain):
            return True
        return self.kind is PatternKind.DOMAIN_AND_SUBDOMAINS and host == self.domain


def parse_pattern(text: str) -> HostPattern:
    """A policy host pattern, normalised like a request host; PatternError says how to fix it."""
    if not isinstance(text, str) or not text.strip():
        raise PatternError("bad_pattern", "host pattern is empty")
    if "://" in text or "/" in text:
        raise PatternError(
            "bad_pattern", f"host pattern {text!r} has a scheme or path; write the host only"
        )
    if "@" in text:
        raise PatternError(
            "bad_pattern", f"host pattern {text!r} has user info; write the host only"
        )
    if ":" in text:
        raise PatternError(
            "bad_pattern", f"host pattern {text!r} has a port; ports are set by the 'ports' key"
        )
    if text.startswith("*."):
        kind, rest = PatternKind.SUBDOMAINS, text[2:]
    elif text.startswith("."):
        kind, rest = PatternKind.DOMAIN_AND_SUBDOMAINS, text[1:]
    else:
        kind, rest = PatternKind.EXACT, text
    if "*" in rest:
        raise PatternError(
            "bad_pattern",
            f"host pattern {text!r}: '*' may only be the whole first label; "
            "use '*.example.com' for subdomains, '.example.com' for the domain and subdomains",
        )
    try:
        domain = normalize_name(rest)
    except HostError as exc:
        raise PatternError("bad_pattern", f"host pattern {text!r}: {exc}") from None
    return HostPattern(kind, domain, text)


@functools.lru_cache(maxsize=1)
def _suffix_extractor() -> object:
    import tldextract

    # suffix_list_urls=() keeps tldextract on its bundled snapshot: never a download.
    return tldextract.TLDExtract(
        suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True
    )


class SuffixKind(StrEnum):
    PUBLIC = "public"
    PRIVATE = "private"


def suffix_kind(domain: str) -> SuffixKind | None:
    """Whether `domain` is itself a public (ICANN) or private (e.g. github.io) suffix."""
    extractor = _suffix_extractor()
    result = extractor(domain)  # type: ignore[operator]
    if result.domain or not result.suffix:
        return None
    return SuffixKind.PRIVATE if result.is_private else SuffixKind.PUBLIC


class HostIndex:
    """Patterns indexed by domain, so a lookup costs one probe per label of the host.

    `match` returns the position of the first pattern (in file order) that matches, so the
    rule id reported is the one a reader finds first.
    """

    __slots__ = ("_at", "_under")

    def __init__(self, patterns: Iterable[HostPattern]) -> None:
        # `_at[d]`: the first pattern matching the host `d` itself (exact or `.d`);
        # `_under[d]`: the first matching any name below `d` (`*.d` or `.d`).
        self._at: dict[str, int] = {}
        self._under: dict[str, int] = {}
        for position, pattern in enumerate(patterns):
            if pattern.kind is not PatternKind.SUBDOMAINS:
                self._at.setdefault(pattern.domain, position)
            if pattern.kind is not PatternKind.EXACT:
                self._under.setdefault(pattern.domain, position)

    def match(self, host: str) -> int | None:
        best = self._at.get(host)
        under = self._under
        dot = host.find(".")
        while dot != -1:
            found = under.get(host[dot + 1 :])
            if found is not None and (best is None or found < best):
                best = found
            dot = host.find(".", dot + 1)
        return best
