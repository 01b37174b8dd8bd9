"""The schema walker's generic readers: lists read once per value, lists of mappings, bounded
text; each problem an issue at the item's line and column, the walk carrying on."""

from __future__ import annotations

import pytest

from gateway.yamlstrict.issues import Severity
from gateway.yamlstrict.source import compose
from gateway.yamlstrict.walk import Walker, string_field


def _walk(text: str) -> tuple[Walker, object]:
    document = compose(text.encode(), source="t.yaml")
    assert document.root is not None
    return Walker.of(document), document.root


def _lines(walker: Walker) -> list[str]:
    return [str(issue).removeprefix("t.yaml:") for issue in walker.sorted_issues()]


def _port_list(walker: Walker, node, duplicates: Severity, **options):
    return walker.unique_items(
        node,
        "ports",
        lambda item, where: walker.integer(item, where, minimum=1, maximum=65535),
        duplicates=duplicates,
        shown=lambda port, _: f"port {port}",
        **options,
    )


UNIQUE_CASES = [
    pytest.param("[443, 80]", Severity.WARNING, (443, 80), [], id="distinct"),
    pytest.param(
        "[443, 80, 443]",
        Severity.WARNING,
        (443, 80),
        ["1:11: warning[duplicate_entry]: ports[2]: port 443 is listed twice"],
        id="repeat-as-warning-dropped",
    ),
    pytest.param(
        "[443, 80, 443]",
        Severity.ERROR,
        None,
        ["1:11: duplicate_entry: ports[2]: port 443 is listed twice"],
        id="repeat-as-error-fails-the-list",
    ),
    pytest.param(
        "[0, 443, 443]",
        Severity.WARNING,
        None,
        [
            "1:2: out_of_range: ports[0] must be an integer from 1 to 65535, got 0",
            "1:10: warning[duplicate_entry]: ports[2]: port 443 is listed twice",
        ],
        id="bad-item-and-repeat-both-reported",
    ),
    pytest.param(
        "{a: 1}",
        Severity.WARNING,
        None,
        ["1:1: wrong_type: ports must be a list, got a mapping"],
        id="not-a-list",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("text", "duplicates", "expected", "lines"), UNIQUE_CASES)
def test_unique_items(text: str, duplicates: Severity, expected, lines: list[str]) -> None:
    walker, root = _walk(text)
    assert _port_list(walker, root, duplicates) == expected
    assert _lines(walker) == lines


@pytest.mark.parametrize(
    ("text", "expected", "lines"),
    [
        pytest.param("[1]", (1,), [], id="one"),
        pytest.param(
            "[]", None, ["1:1: bad_value: ports must list at least one port"], id="empty-refused"
        ),
    ],
)
def test_unique_items_at_least_one(text: str, expected, lines: list[str]) -> None:
    walker, root = _walk(text)
    assert _port_list(walker, root, Severity.ERROR, at_least_one="port") == expected
    assert _lines(walker) == lines


def test_entries_reads_mappings_and_marks_other_items_invalid() -> None:
    walker, root = _walk("- {name: a}\n- 5\n- {}\n")
    fields = {"name": string_field(required=True)}
    entries = walker.entries(root, "things", fields, expected="a mapping with a name")
    assert entries is not None
    assert [(e.values.get("name"), sorted(e.invalid)) for e in entries] == [
        ("a", []),
        (None, ["name"]),
        (None, ["name"]),
    ]
    assert _lines(walker) == [
        "2:3: wrong_type: things[1] must be a mapping with a name, got the integer 5",
        "3:3: missing_key: things[2].name is required",
    ]


@pytest.mark.parametrize(
    ("text", "options", "expected", "lines"),
    [
        pytest.param('"ok"', {}, "ok", [], id="fits"),
        pytest.param(
            '"  "', {}, None, ["1:1: bad_value: v must be 1 to 4 printable characters"],
            id="only-white-space",
        ),
        pytest.param(
            '"12345"', {"note": " (one line)"}, None,
            ["1:1: bad_value: v must be 1 to 4 printable characters (one line)"], id="too-long",
        ),
        pytest.param(
            '"a\\tb"', {}, None, ["1:1: bad_value: v must be 1 to 4 printable characters"],
            id="control-character",
        ),
        pytest.param('"a\\tb"', {"printable": False}, "a\tb", [], id="control-allowed"),
    ],
)  # fmt: skip
def test_text(text: str, options: dict, expected, lines: list[str]) -> None:
    walker, root = _walk(text)
    assert walker.text(root, "v", max_length=4, **options) == expected
    assert _lines(walker) == lines
