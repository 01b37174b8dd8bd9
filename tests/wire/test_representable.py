"""wire.representable: what others chose, escaped and capped before a record or message."""

from __future__ import annotations

import orjson
import pytest

from gateway.wire.representable import needs_repair, representable

CASES = [
    ("plain", "text/html; charset=utf-8", "text/html; charset=utf-8"),
    ("unicode kept", "Grüße — 日本", "Grüße — 日本"),
    ("tab kept", "a\tb", "a\tb"),
    ("not utf-8", b"text/\xffhtml".decode("utf-8", "surrogateescape"), "text/\\xffhtml"),
    ("lone surrogate", "a\ud800b", "a\\ud800b"),
    ("nul", "a\x00b", "a\\x00b"),
    ("newline", "a\r\nX-Forged: 1", "a\\x0d\\x0aX-Forged: 1"),
    ("del and c1", "a\x7f\x85b", "a\\x7f\\x85b"),
]


@pytest.mark.parametrize(("value", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_values_are_escaped(value: str, expected: str) -> None:
    shown = representable(value)
    assert shown == expected
    orjson.dumps(shown)  # always serialisable
    assert not needs_repair(shown)


def test_bytes_are_read_as_utf_8_with_each_bad_byte_escaped() -> None:
    assert representable(b"ok \xc3\xa9 \xff\x00") == "ok é \\xff\\x00"


def test_over_long_values_are_cut_with_a_marker() -> None:
    shown = representable("\udcff" * 5000, limit=100)
    assert shown.startswith("\\xff" * 100) and shown.endswith("…[4900 more characters]")
    assert representable("x" * 100, limit=100) == "x" * 100


def test_needs_repair_finds_only_surrogates() -> None:
    assert needs_repair("\udc80") and not needs_repair("\x00 é")
