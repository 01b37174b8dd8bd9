"""JSON on the tools' wire: request bodies read strictly, results written as bytes.

Requests: `loads_request` reads a body whose meaning is unambiguous, so a repeated key
(`{"url": a, "url": b}`) is found wherever it stands and refused by the adapter, never
decided one way by one reader and another way by the next.

Results: orjson, except for a page's text already held as UTF-8.

CPython keeps most page text as UCS-2, and encoding 100 KB of it to UTF-8 is most of what
serialising a WebFetch answer costs; the sanitised text's UTF-8 is at hand (the body as
received, or the bytes its hash was taken over), and making a JSON string of it is a few
byte replacements. `JsonText` is a str (for every other reader: MCP text, tests, Research)
that also carries its JSON literal; `dumps` writes that literal instead of encoding again.
"""

from __future__ import annotations

import json
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

    `utf8` must be sanitised text (provenance.markers): no control character but `\\n` and `\\t`,
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


class RepeatedKeys(dict[str, Any]):
    """A JSON object that named `key` more than once (its last value kept)."""

    key: str


class RequestJSONError(ValueError):
    """A request body that is not valid JSON, or nested too deeply to read."""


def loads_request(raw: bytes | str) -> Any:
    """A request body as Python values; objects that repeated a key are `RepeatedKeys`.

    orjson decides what is valid JSON (no NaN, no lone surrogates, UTF-8 only); the standard
    library's reader, which hands over each object's pairs, then finds repeated keys, after
    unescaping (`"url"` and `"\\u0075rl"` are the same key)."""
    try:
        orjson.loads(raw)
        return json.loads(raw, object_pairs_hook=_object)
    except orjson.JSONDecodeError as exc:
        raise RequestJSONError(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise RequestJSONError("malformed JSON: nested too deeply") from None


def repeated_key(value: Any, path: str = "") -> str | None:
    """The dotted path of the first repeated key in `value` (as `loads_request` read it)."""
    if isinstance(value, dict):
        if isinstance(value, RepeatedKeys):
            return f"{path}{value.key}"
        for key, item in value.items():
            found = repeated_key(item, f"{path}{key}.")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = repeated_key(item, f"{path}{index}.")
            if found is not None:
                return found
    return None


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    repeated = RepeatedKeys(value)
    repeated.key = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
    return repeated
