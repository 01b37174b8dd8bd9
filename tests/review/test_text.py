"""Hidden characters as visible escapes; cutting long values."""

from __future__ import annotations

import pytest

from gateway.review.text import cut, segments, visible


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain", "plain"),
        ("a\u202eb", "a<U+202E>b"),
        ("exa\u200bmple", "exa<U+200B>mple"),
        ("tab\tnew\nline", "tab<U+0009>new<U+000A>line"),
        ("\u2066isolate\u2069", "<U+2066>isolate<U+2069>"),
        ("tag\U000e0041", "tag<U+E0041>"),
        ("bom\ufeff", "bom<U+FEFF>"),
        ("nul\x00del\x7f", "nul<U+0000>del<U+007F>"),
        ("filler\u3164", "filler<U+3164>"),
        ("éü 中文 emoji 🙂", "éü 中文 emoji 🙂"),
        ("", ""),
    ],
)
def test_visible(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_segments_mark_the_escapes() -> None:
    assert list(segments("a\u202eb")) == [("a", False), ("<U+202E>", True), ("b", False)]
    assert list(segments("")) == []


def test_cut() -> None:
    assert cut("abcdef", 10) == ("abcdef", 0)
    assert cut("abcdef", 4) == ("abcd", 2)
