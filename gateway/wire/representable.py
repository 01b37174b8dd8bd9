"""What a value someone else chose (an upstream's status line or header, an agent's header
or URL piece) reads as in a record or a message: always valid UTF-8, free of control
characters, and of bounded length, so no sender can make a record unwritable or a line of
the log spill onto the next. Pure, and cheap when there is nothing to do.

Escapes: a byte that was not UTF-8 (decoded with `surrogateescape`, as aiohttp and the
standard library decode header bytes) is `\\xNN`; any other lone surrogate `\\uXXXX`; a
control character (C0, DEL, C1; NUL among them) `\\xNN`. A value longer than `limit`
characters is cut there and ends with `…[N more characters]`.
"""

from __future__ import annotations

import re

DEFAULT_LIMIT = 1024

# Lone surrogates and control characters other than HTAB: what needs an escape.
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte surrogateescape kept: show the byte itself
        return f"\\x{code - 0xDC00:02x}"
    if code >= 0xD800:
        return f"\\u{code:04x}"
    return f"\\x{code:02x}"


def representable(value: str | bytes, *, limit: int = DEFAULT_LIMIT) -> str:
    """`value` escaped and capped as the module says; bytes are read as UTF-8 first, every
    byte that is not kept as its escape."""
    text = value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    if len(text) > limit:
        cut = len(text) - limit
        text = text[:limit]
        # A cut through a surrogate pair cannot happen (str holds code points), and the
        # escapes below may lengthen the kept part; the marker says what was left out.
        return _UNSAFE.sub(_escape, text) + f"…[{cut} more characters]"
    if text.isprintable() or not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_escape, text)


def needs_repair(text: str) -> bool:
    """Whether `text` holds a lone surrogate (which no UTF-8 encoder writes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
