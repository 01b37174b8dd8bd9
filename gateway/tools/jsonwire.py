"""JSON on the tools' wire: request bodies read strictly, results written as bytes.

Requests: `loads_request` reads a body whose meaning is unambiguous, so a repeated key
(`{"url": a, "url": b}`) is found wherever it stands and refused by the adapter, never
decided one way by one reader and another way by the next.

Results: orjson, which writes str, int, dict and list subclasses (str enums, for instance)
as their base types. It encodes a page's 100 KB of text in about 10 µs here, faster than
building the JSON literal from the text's UTF-8 by byte replacements (26 to 41 µs), which
this module once did.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson

from gateway.audit.repair import repair_record


def dumps(value: Any) -> bytes:
    """A result as JSON bytes. A value that slipped through unescaped (a lone surrogate from
    an upstream's bytes in a message) is escaped here rather than failing the answer."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        # Strings only: a value JSON has no form for is a bug, and still raises TypeError.
        repaired, _ = repair_record(
            {"": value}, limit=sys.maxsize, max_items=sys.maxsize, coerce=False
        )
        return orjson.dumps(repaired[""])


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
