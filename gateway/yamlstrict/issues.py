"""`Issue`: one problem at a 1-based line and column, as every YAML loader reports it.

Owns the issue's shape and its printed form (`FILE:LINE:COL: code: message`, warnings written
`warning[code]`), their order, and `SourceError` for text that could not become nodes at all.
Knows nothing of YAML itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class Mark(Protocol):
    """A position in the text, 0-based (PyYAML's pure and C marks both have these)."""

    line: int
    column: int


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem at a 1-based position. Printed `FILE:LINE:COL: code: message`; a warning's
    code is written `warning[code]` so that a reader (and grep) can tell them apart."""

    file: str
    line: int
    col: int
    code: str
    message: str
    severity: str = Severity.ERROR

    @property
    def is_error(self) -> bool:
        return self.severity == Severity.ERROR

    @property
    def label(self) -> str:
        return self.code if self.is_error else f"warning[{self.code}]"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.label}: {self.message}"


def issue_at(
    source: str, mark: Mark | None, code: str, message: str, severity: str = Severity.ERROR
) -> Issue:
    """An Issue at a 0-based mark (None: the top of the file)."""
    if mark is None:
        return Issue(source, 1, 1, code, message, severity)
    return Issue(source, mark.line + 1, mark.column + 1, code, message, severity)


def sort_issues(issues: list[Issue]) -> tuple[Issue, ...]:
    return tuple(sorted(issues, key=lambda i: (i.line, i.col, i.severity != Severity.ERROR)))


class SourceError(Exception):
    """The text could not be turned into a node tree; `issues` say why (usually one)."""

    def __init__(self, issues: tuple[Issue, ...]) -> None:
        super().__init__("\n".join(str(i) for i in issues))
        self.issues = issues
