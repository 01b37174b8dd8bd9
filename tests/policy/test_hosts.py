"""Host normalisation and the three pattern forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.policy.hosts import (
    HostError,
    HostIndex,
    PatternError,
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
