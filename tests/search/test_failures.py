from __future__ import annotations

import pytest

from gateway.search.failures import scrub_secrets

KEY = "tvly-AbC123xyz"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(f"bad key {KEY}", "bad key [redacted]", id="raw"),
        pytest.param(f"bad key {KEY.upper()}!", "bad key [redacted]!", id="upper-case"),
        pytest.param("k=tvly%2DAbC123xyz&x=1", "k=[redacted]&x=1", id="percent-encoded"),
        pytest.param("k=tvly%2dabc123XYZ", "k=[redacted]", id="percent-encoded-lower"),
        pytest.param("no secret here", "no secret here", id="untouched"),
        pytest.param(f"{KEY}{KEY}", "[redacted][redacted]", id="repeated"),
    ],
)
def test_scrub(text: str, expected: str) -> None:
    assert scrub_secrets(text, [KEY, None, "short"]) == expected


def test_longest_secret_first() -> None:
    assert scrub_secrets("x sk-abcdef-long y", ["abcdef", "sk-abcdef-long"]) == "x [redacted] y"


def test_short_values_are_not_treated_as_secrets() -> None:
    assert scrub_secrets("a b c", ["a", ""]) == "a b c"
