"""Tool results as JSON bytes: orjson, except for a page's text already held as UTF-8.

CPython keeps most page text as UCS-2, and encoding 100 KB of it to UTF-8 is most of what
serialising a WebFetch answer costs; the sanitised text's UTF-8 is at hand (the body as
received, or the bytes its hash was taken over), and making a JSON string of it is a few
byte replacements. `JsonText` is a str (for every other reader: MCP text, tests, Research)
that also carries its JSON literal; `dumps` writes that literal instead of encoding again.
"""

from __future__ import annotations

from typing import Any

import orjson

_OPTIONS = orjson.OPT_PASSTHROUGH_SUBCLASS  # str subclasses reach `_default`


class JsonText(str):
    """A str with its own JSON string literal (`json`, quotes included)."""

    json: bytes

    def __new__(cls, text: str, json: bytes) -> JsonText:
        made = super().__new__(cls, text)
        made.json = json
        return made


def json_literal(head: str, utf8: bytes, tail: str) -> bytes:
    """The JSON string literal of `head + text + tail`, `text` given as its UTF-8 bytes.

    `utf8` must be sanitised text (CONTRACT 5.5): no control character but `\\n` and `\\t`,
    which with `"` and `\\` are all that a JSON string must escape.
    """
    body = (
        utf8.replace(b"\\", b"\\\\")
        .replace(b'"', b'\\"')
        .replace(b"\n", b"\\n")
        .replace(b"\t", b"\\t")
    )
    return b"".join((orjson.dumps(head)[:-1], body, orjson.dumps(tail)[1:]))


def dumps(value: Any) -> bytes:
    """`orjson.dumps`, writing each `JsonText`'s own literal."""
    return orjson.dumps(value, default=_default, option=_OPTIONS)


def _default(value: Any) -> Any:
    if isinstance(value, JsonText):
        return orjson.Fragment(value.json)
    # Other subclasses, passed through by the option, as their base types.
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
