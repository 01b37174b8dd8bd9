"""Host normalisation and the three pattern forms."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

import idna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.hosts import (
    MAX_LABEL_LENGTH,
    MAX_NAME_LENGTH,
    HostError,
    HostIndex,
    HostPattern,
    PatternError,
    PatternKind,
    SuffixKind,
    normalize_name,
    parse_pattern,
    suffix_kind,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("faß.de", "xn--fa-hia.de"),  # UTS 46 non-transitional, never IDNA 2003's fass.de
        ("BÜCHER.de", "xn--bcher-kva.de"),
        ("ｅｘａｍｐｌｅ.com", "example.com"),  # fullwidth letters map under UTS 46
        ("xn--fa-hia.de", "xn--fa-hia.de"),
        ("_srv.example.com", "_srv.example.com"),
    ],
)
def test_normalize_name(raw: str, expected: str) -> None:
    assert normalize_name(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "a..b",
        ".a",
        "a b",
        "a%2eb",
        "a\\b",
        "a/b",
        "a\x00b",
        "exa\u00admple.com",
        "exa\u200bmple.com",
        "e\u202ex.com",
        "a" * 64 + ".com",
        "a;b.com",
        "a*b.com",
        "a@b",
        "a:b",
    ],
)
def test_normalize_name_rejects(raw: str) -> None:
    with pytest.raises(HostError):
        normalize_name(raw)


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_normalize_name_is_idempotent_or_rejects(raw: str) -> None:
    try:
        once = normalize_name(raw)
    except HostError:
        return
    assert normalize_name(once) == once
    assert once == once.lower() and once.isascii() and not once.endswith(".")


@given(
    st.from_regex(
        r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?){0,3}",
        fullmatch=True,
    )
)
def test_pattern_and_host_normalise_alike(name: str) -> None:
    for variant in (name, name.upper(), name + "."):
        assert parse_pattern(variant).matches(normalize_name(name))
        assert parse_pattern("." + variant).matches(normalize_name("x." + name))


@pytest.mark.parametrize(
    ("pattern", "host", "matches"),
    [
        ("example.com", "example.com", True),
        ("example.com", "www.example.com", False),
        ("*.example.com", "example.com", False),
        ("*.example.com", "a.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "evilexample.com", False),
        (".example.com", "example.com", True),
        (".example.com", "a.b.example.com", True),
        (".example.com", "example.com.evil.com", False),
        ("FAß.de", "xn--fa-hia.de", True),
    ],
)
def test_pattern_matches(pattern: str, host: str, matches: bool) -> None:
    assert parse_pattern(pattern).matches(host) is matches
    assert (HostIndex([parse_pattern(pattern)]).match(host) == 0) is matches


@pytest.mark.parametrize(
    "pattern",
    [
        "https://example.com",
        "example.com/path",
        "example.com:443",
        "user@example.com",
        "api-*.example.com",
        "ex*ample.com",
        "*",
        "*.",
        "*.*.example.com",
        "",
        "a..b",
    ],
)
def test_parse_pattern_rejects(pattern: str) -> None:
    with pytest.raises(PatternError):
        parse_pattern(pattern)


def test_index_reports_first_rule_in_file_order() -> None:
    index = HostIndex(
        [parse_pattern(p) for p in ["*.b.example.com", ".example.com", "a.b.example.com"]]
    )
    assert index.match("a.b.example.com") == 0
    assert index.match("example.com") == 1
    assert index.match("other.com") is None


@pytest.mark.parametrize(
    ("domain", "kind"),
    [
        ("com", SuffixKind.PUBLIC),
        ("co.uk", SuffixKind.PUBLIC),
        ("zip", SuffixKind.PUBLIC),
        ("github.io", SuffixKind.PRIVATE),
        ("example.com", None),
        ("user.github.io", None),
    ],
)
def test_suffix_kind_offline(domain: str, kind: SuffixKind | None) -> None:
    assert suffix_kind(domain) is kind


# --- The plain-name shortcut in normalize_name changes nothing ----------------------------
#
# A frozen copy of normalize_name before the shortcut (without its cache): every name gives
# the same A-label or the same error message. It deliberately duplicates hosts.py: do not
# import or merge it.

_REF_LABEL_RE = re.compile(r"[a-z0-9_-]+\Z")
_REF_FORBIDDEN_RE = re.compile(r"[\x00-\x20\x7f%\\/?#@:\[\]<>\"'`{}|^]")


def _reference_is_invisible(ch: str) -> bool:
    return (
        unicodedata.category(ch) == "Cf"
        or ch in "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u3164\uffa0"
        or "\ufe00" <= ch <= "\ufe0f"
    )


def _reference_normalize_name(raw: str) -> str:
    if not raw:
        raise HostError("empty host")
    if len(raw) > 4 * MAX_NAME_LENGTH:
        raise HostError("host name too long")
    bad = _REF_FORBIDDEN_RE.search(raw)
    if bad:
        raise HostError(f"host contains the forbidden character {bad.group()!r}")
    host = raw[:-1] if raw.endswith(".") else raw
    if not host.isascii():
        for ch in host:
            if _reference_is_invisible(ch):
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
        if not _REF_LABEL_RE.match(label):
            raise HostError(
                f"host label {label!r} has characters other than letters, digits, '-' and '_'"
            )
    return host


def _normalised_or_error(normalize: Callable[[str], str], raw: str) -> tuple[str, str]:
    try:
        return ("name", normalize(raw))
    except HostError as exc:
        return ("error", str(exc))


def _label(size: int) -> str:
    return "a" * size


NAME_EDGES = [
    ("one label", "localhost"),
    ("upper", "WWW.Example.COM"),
    ("trailing dot", "example.com."),
    ("two trailing dots", "example.com.."),
    ("only a dot", "."),
    ("leading dot", ".example.com"),
    ("label 63", _label(63) + ".com"),
    ("label 64", _label(64) + ".com"),
    ("name 253", ".".join([_label(63)] * 3 + [_label(61)])),
    ("name 253 and dot", ".".join([_label(63)] * 3 + [_label(61)]) + "."),
    ("name 254", ".".join([_label(63)] * 3 + [_label(62)])),
    ("name 254 and dot", ".".join([_label(63)] * 3 + [_label(62)]) + "."),
    ("kelvin sign", "\u212aelvin.com"),
    ("dotless i", "\u0131.com"),
    ("underscore and hyphen", "_a-b.-c-.com"),
    ("punycode kept", "XN--FA-HIA.de"),
    ("newline at end", "example.com\n"),
]


@pytest.mark.parametrize("raw", [e[1] for e in NAME_EDGES], ids=[e[0] for e in NAME_EDGES])
def test_normalize_name_same_as_reference_on_edges(raw: str) -> None:
    assert _normalised_or_error(normalize_name, raw) == _normalised_or_error(
        _reference_normalize_name, raw
    )


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(st.sampled_from("aZ09_-.\u0131\u212a\u00df %*\n"), max_size=30),
        st.lists(st.text(st.sampled_from("abcXYZ019_-"), min_size=0, max_size=70), max_size=6).map(
            ".".join
        ),
    )
)
def test_normalize_name_same_as_reference(raw: str) -> None:
    assert _normalised_or_error(normalize_name, raw) == _normalised_or_error(
        _reference_normalize_name, raw
    )


# --- HostIndex.match is "the first pattern in file order that matches" --------------------

_LABELS = st.sampled_from(["a", "b", "c", "example", "com"])
_DOMAINS = st.lists(_LABELS, min_size=1, max_size=3).map(".".join)
_PATTERNS = st.builds(
    lambda kind, domain: HostPattern(kind, domain, domain),
    st.sampled_from(list(PatternKind)),
    _DOMAINS,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PATTERNS, max_size=8), st.lists(_LABELS, min_size=1, max_size=5).map(".".join))
def test_index_match_is_first_matching_pattern(patterns: list[HostPattern], host: str) -> None:
    first = next((i for i, pattern in enumerate(patterns) if pattern.matches(host)), None)
    assert HostIndex(patterns).match(host) == first
