"""The one problem shape: printed `FILE:LINE:COL: code: message` (a warning's code written
`warning[code]`), placed from 0-based marks, sorted by position with errors first."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.yamlstrict.issues import Issue, Severity, SourceError, issue_at, sort_issues


@dataclass
class At:
    line: int
    column: int


def test_an_issue_prints_its_place_and_code() -> None:
    assert (
        str(Issue("p.yaml", 3, 5, "bad_key", "no such key")) == "p.yaml:3:5: bad_key: no such key"
    )


def test_a_warning_says_so_in_its_label() -> None:
    warning = Issue("p.yaml", 1, 1, "unused", "never read", Severity.WARNING)
    assert not warning.is_error
    assert str(warning) == "p.yaml:1:1: warning[unused]: never read"


def test_issue_at_turns_a_zero_based_mark_into_a_one_based_place() -> None:
    assert (
        issue_at("p.yaml", At(0, 0), "c", "m").line,
        issue_at("p.yaml", At(4, 2), "c", "m").col,
    ) == (1, 3)
    assert (issue_at("p.yaml", None, "c", "m").line, issue_at("p.yaml", None, "c", "m").col) == (
        1,
        1,
    )


def test_issues_sort_by_place_errors_before_warnings() -> None:
    warning = Issue("p", 2, 1, "w", "m", Severity.WARNING)
    error = Issue("p", 2, 1, "e", "m")
    first = Issue("p", 1, 9, "e", "m")
    assert sort_issues([warning, error, first]) == (first, error, warning)


def test_a_source_error_carries_its_issues_in_its_message() -> None:
    issues = (Issue("p", 1, 1, "a", "one"), Issue("p", 2, 1, "b", "two"))
    error = SourceError(issues)
    assert error.issues == issues
    assert str(error) == "p:1:1: a: one\np:2:1: b: two"
