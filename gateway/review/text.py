"""Showing hostile text as what it is: control, format (bidi overrides, zero-width), separator
and other invisible characters become visible escapes such as `<U+202E>`, and long values are
cut with the length of the rest said. The page escapes HTML itself; this owns only what a
reviewer's eye would otherwise miss.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

# Categories shown as escapes: controls, format characters (bidi, zero-width, tags), lone
# surrogates, private use, unassigned, and line/paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Visible in no font, or a blank that looks like nothing (Hangul fillers, the braille blank).
_HIDDEN_EXTRA = frozenset("\u115f\u1160\u3164\uffa0\u2800\u034f") | frozenset(
    chr(c) for c in range(0xFE00, 0xFE10)
)
_PLAIN = re.compile(r"[ -~]*")  # printable ASCII: nothing to look for


def is_hidden(char: str) -> bool:
    return char in _HIDDEN_EXTRA or unicodedata.category(char) in _HIDDEN_CATEGORIES


def escape_code(char: str) -> str:
    return f"<U+{ord(char):04X}>"


def segments(text: str) -> Iterator[tuple[str, bool]]:
    """The text as (piece, is_escape) runs: plain pieces as they are, each hidden character as
    its `<U+XXXX>` escape."""
    if _PLAIN.fullmatch(text):
        if text:
            yield text, False
        return
    start = 0
    for index, char in enumerate(text):
        if is_hidden(char):
            if index > start:
                yield text[start:index], False
            yield escape_code(char), True
            start = index + 1
    if start < len(text):
        yield text[start:], False


def visible(text: str) -> str:
    """The text with every hidden character as its escape (for titles and plain text)."""
    return "".join(piece for piece, _ in segments(text))


def cut(text: str, limit: int) -> tuple[str, int]:
    """(the first `limit` characters, how many were left out)."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit
