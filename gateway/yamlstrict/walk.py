"""Schema walking: YAML nodes -> checked values, every problem an `Issue` and the walk carrying on.

Owns the readers for scalars, lists and mappings (unknown keys with a "did you mean" hint,
defaults, required keys, entries listed twice) and how a value reads in a message. Generic
(policies and the gateway configuration both use it); never constructs domain objects.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gateway.yamlstrict.issues import Issue, Severity, issue_at, sort_issues
from gateway.yamlstrict.source import (
    BOOL_TAG,
    FLOAT_TAG,
    INT_TAG,
    MERGE_TAG,
    NULL_TAG,
    STR_TAG,
    Document,
)

T = TypeVar("T", bound=Hashable)

# YAML 1.1 spellings that some parsers read as booleans; only `true` and `false` are accepted.
YAML11_BOOLEANS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false"})
_DECIMAL_RE = re.compile(r"[-+]?[0-9]+\Z")
_NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")

ValueReader = Callable[["Walker", Any, str], Any]  # (walker, node or None, path)


@dataclass(frozen=True, slots=True)
class Field:
    """One expected key: how to read its value and what it is when absent or null."""

    read: ValueReader
    default: Any = None
    required: bool = False
    read_absent: bool = False  # call `read` with None too (nested sections fill their defaults)


@dataclass(slots=True)
class Section:
    """The keys of one mapping: values (defaults filled in), their nodes, and which failed."""

    node: Node | None
    values: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    invalid: set[str] = field(default_factory=set)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def valid(self, *keys: str) -> bool:
        return not self.invalid.intersection(keys)


def describe(node: Node) -> str:
    """How a value reads in a message: `the string '80'`, `a list`, `the integer 5`."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    kind = {
        INT_TAG: "the integer",
        FLOAT_TAG: "the number",
        BOOL_TAG: "the boolean",
        NULL_TAG: "null",
    }.get(node.tag, "the string")
    if kind in ("the integer", "the number", "the boolean"):
        return f"{kind} {_short(node.value)}"
    return kind if kind == "null" else f"{kind} {_short(node.value)!r}"


def _short(value: str, limit: int = 60) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def suggest(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    """`; did you mean 'x'?` for the closest candidate, or an empty string."""
    folded = {c.lower(): c for c in candidates}
    match = folded.get(word.lower())
    if match is None:
        close = difflib.get_close_matches(word.lower(), list(folded), n=1, cutoff=0.6)
        match = folded[close[0]] if close else None
    return f"; did you mean {match!r}?" if match else ""


def is_null(node: Node | None) -> bool:
    return node is None or (
        isinstance(node, ScalarNode) and node.tag == NULL_TAG and node.style is None
    )


def _looks_unquoted_kind(value: str, expected: str) -> bool:
    """A quoted value that would be right without its quotes (`"80"` for a port)."""
    if expected == "true or false":
        return value in ("true", "false")
    if "integer" in expected:
        return bool(_DECIMAL_RE.match(value))
    return "number" in expected and bool(_NUMBER_RE.match(value))


def _is_loose_boolean(node: Node) -> bool:
    """A YAML 1.1 boolean already reported while composing; readers stay quiet about it."""
    return (
        isinstance(node, ScalarNode)
        and node.tag == BOOL_TAG
        and node.value not in ("true", "false")
    )


class Walker:
    """Reads nodes into values, recording an Issue for every problem and carrying on, so one
    run reports everything. Readers return None for a value they could not read."""

    def __init__(
        self,
        source: str,
        issues: tuple[Issue, ...] | list[Issue] = (),
        quiet: frozenset[int] = frozenset(),
    ) -> None:
        self.source = source
        self.issues: list[Issue] = list(issues)
        self.quiet = quiet

    @classmethod
    def of(cls, document: Document) -> Walker:
        """A walker that starts from the composer's findings and stays quiet about them."""
        return cls(document.source, document.issues, document.quiet)

    def is_reported(self, node: Node) -> bool:
        return id(node) in self.quiet or _is_loose_boolean(node)

    def error(self, at: Node | None, code: str, message: str) -> None:
        self.report(at, code, message, Severity.ERROR)

    def warning(self, at: Node | None, code: str, message: str) -> None:
        self.report(at, code, message, Severity.WARNING)

    def _withdraw(self, at: Node, code: str) -> None:
        line, col = at.start_mark.line + 1, at.start_mark.column + 1
        self.issues = [
            i for i in self.issues if not (i.line == line and i.col == col and i.code == code)
        ]

    def report(self, at: Node | None, code: str, message: str, severity: str) -> None:
        mark = at.start_mark if at is not None else None
        self.issues.append(issue_at(self.source, mark, code, message, severity))

    @property
    def has_errors(self) -> bool:
        return any(i.is_error for i in self.issues)

    def sorted_issues(self) -> tuple[Issue, ...]:
        return sort_issues(self.issues)

    def wrong_type(self, node: Node, path: str, expected: str) -> None:
        if self.is_reported(node):
            return
        hint = ""
        if (
            isinstance(node, ScalarNode)
            and node.style
            and _looks_unquoted_kind(node.value, expected)
        ):
            hint = "; remove the quotes"
        self.error(node, "wrong_type", f"{path} must be {expected}, got {describe(node)}{hint}")

    def mapping(
        self,
        node: Node | None,
        fields: Mapping[str, Field],
        *,
        path: str,
        unknown_code: str = "unknown_key",
        unknown_noun: str = "key",
        unknown_hint: Callable[[str], str] | None = None,
    ) -> Section:
        """Every declared key read (or defaulted); unknown keys reported with a suggestion."""
        section = Section(node, {name: f.default for name, f in fields.items()})
        if is_null(node):
            node = None
        elif not isinstance(node, MappingNode):
            assert node is not None
            self.wrong_type(node, path or "the document", "a mapping")
            section.invalid.update(fields)
            node = None  # still fill nested defaults below, so callers need no special case
        items = node.value if node is not None else []
        seen: set[str] = set()
        for key, value in items:
            if not isinstance(key, ScalarNode) or self.is_reported(key):
                continue  # reported while composing
            name = key.value
            if name in seen:
                continue  # duplicate, reported while composing
            seen.add(name)
            spec = fields.get(name)
            where = f"{path}." if path else ""
            if spec is None:
                if key.tag == MERGE_TAG:
                    self.error(
                        key, unknown_code, "merge keys (<<) are not supported; write the keys out"
                    )
                else:
                    extra = unknown_hint(name) if unknown_hint else ""
                    known = ", ".join(fields) if len(fields) <= 8 else ""
                    tail = (
                        extra
                        or suggest(name, tuple(fields))
                        or (f" (expected one of: {known})" if known else "")
                    )
                    self.error(key, unknown_code, f"unknown {unknown_noun} {where}{name}{tail}")
                continue
            section.nodes[name] = value
            if is_null(value) and not spec.read_absent:
                continue
            result = spec.read(self, value, f"{where}{name}")
            if result is None:
                section.invalid.add(name)
            else:
                section.values[name] = result
        for name, spec in fields.items():
            if spec.read_absent and name not in section.nodes:
                section.values[name] = spec.read(self, None, f"{path}.{name}" if path else name)
            if spec.required and (name not in section.nodes or is_null(section.nodes[name])):
                section.invalid.add(name)
                at = section.nodes.get(name, node)
                where = f"{path}." if path else ""
                self.error(at, "missing_key", f"{where}{name} is required")
        return section

    def sequence(
        self, node: Node, path: str, *, at_least_one: str | None = None
    ) -> list[Node] | None:
        """The items of a list; with `at_least_one` (what an item is), an empty list is an
        error too."""
        if not isinstance(node, SequenceNode):
            self.wrong_type(node, path, "a list")
            return None
        if at_least_one is not None and not node.value:
            self.error(node, "bad_value", f"{path} must list at least one {at_least_one}")
            return None
        return list(node.value)

    def unique_items(
        self,
        node: Node,
        path: str,
        read_item: Callable[[Node, str], T | None],
        *,
        duplicates: Severity,
        shown: Callable[[T, Node], str] = lambda value, _: repr(value),
        at_least_one: str | None = None,
    ) -> tuple[T, ...] | None:
        """A list whose items `read_item` reads (with the path `path[i]`), each value once.
        An entry listed again is a `duplicate_entry` warning (dropped) or error; the whole
        list is None when any item could not be read or repeats as an error. `shown`
        names a repeated value in the message; `at_least_one` is `sequence`'s."""
        items = self.sequence(node, path, at_least_one=at_least_one)
        if items is None:
            return None
        values: list[T] = []
        ok = True
        for i, item in enumerate(items):
            where = f"{path}[{i}]"
            value = read_item(item, where)
            if value is None:
                ok = False
            elif value in values:
                ok = ok and duplicates != Severity.ERROR
                message = f"{where}: {shown(value, item)} is listed twice"
                self.report(item, "duplicate_entry", message, duplicates)
            else:
                values.append(value)
        return tuple(values) if ok else None

    def entries(
        self,
        node: Node,
        path: str,
        fields: Mapping[str, Field],
        *,
        expected: str,
        at_least_one: str | None = None,
    ) -> list[Section] | None:
        """A list of mappings, each read with `fields` at `path[i]`. An item that is not a
        mapping is reported as not `expected` and comes back as a Section with every field
        invalid, so that a caller checking entries against each other skips it."""
        items = self.sequence(node, path, at_least_one=at_least_one)
        if items is None:
            return None
        sections = []
        for i, item in enumerate(items):
            if isinstance(item, MappingNode):
                sections.append(self.mapping(item, fields, path=f"{path}[{i}]"))
            else:
                self.wrong_type(item, f"{path}[{i}]", expected)
                defaults = {name: spec.default for name, spec in fields.items()}
                sections.append(Section(item, defaults, invalid=set(fields)))
        return sections

    def string(self, node: Node, path: str) -> str | None:
        if isinstance(node, ScalarNode) and node.tag == STR_TAG:
            return str(node.value)
        self.wrong_type(node, path, "a string")
        return None

    def text(
        self, node: Node, path: str, *, max_length: int, printable: bool = True, note: str = ""
    ) -> str | None:
        """A string of 1 to `max_length` characters, not only white space; `printable`: no
        line breaks or control characters. `note` ends the message."""
        text = self.string(node, path)
        if text is None:
            return None
        if not text.strip() or len(text) > max_length or (printable and not text.isprintable()):
            kind = "printable characters" if printable else "characters"
            self.error(node, "bad_value", f"{path} must be 1 to {max_length} {kind}{note}")
            return None
        return text

    def boolean(self, node: Node, path: str) -> bool | None:
        if isinstance(node, ScalarNode) and node.style is None and node.value in ("true", "false"):
            return node.value == "true"
        if (
            isinstance(node, ScalarNode)
            and node.style is None
            and node.value.lower() in YAML11_BOOLEANS
        ):
            if not self.is_reported(node):  # y, n, True, … not already reported
                self.error(
                    node,
                    "bad_boolean",
                    f"{path}: {node.value!r} is not a boolean; write true or false",
                )
            return None
        self.wrong_type(node, path, "true or false")
        return None

    def integer(
        self, node: Node, path: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        expected = _integer_kind(minimum, maximum)
        if not (
            isinstance(node, ScalarNode) and node.style is None and _DECIMAL_RE.match(node.value)
        ):
            self.wrong_type(node, path, expected)
            return None
        digits = node.value.lstrip("+-")
        if len(digits) > 1 and digits.startswith("0"):
            self.error(
                node,
                "wrong_type",
                f"{path}: {node.value!r} has a leading zero (YAML 1.1 octal); write it in decimal",
            )
            return None
        if len(digits) > 30:
            self.error(node, "out_of_range", f"{path} must be {expected}, got {_short(node.value)}")
            return None
        value = int(node.value)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            self.error(node, "out_of_range", f"{path} must be {expected}, got {value}")
            return None
        return value

    def number(
        self, node: Node, path: str, *, positive: bool = False, maximum: float | None = None
    ) -> float | None:
        expected = "a positive number" if positive else "a number"
        if maximum is not None:
            expected += f" up to {maximum:g}"
        if not (
            isinstance(node, ScalarNode) and node.style is None and _NUMBER_RE.match(node.value)
        ):
            self.wrong_type(node, path, expected)
            return None
        value = float(node.value)
        if (
            not math.isfinite(value)
            or (positive and value <= 0)
            or (maximum is not None and value > maximum)
        ):
            self.error(node, "out_of_range", f"{path} must be {expected}, got {node.value}")
            return None
        return value

    def choice(self, node: Node, path: str, choices: tuple[str, ...]) -> str | None:
        expected = ", ".join(choices)
        if isinstance(node, ScalarNode) and _is_loose_boolean(node) and node.value in choices:
            # `mode: off` where `off` is one of the words this key takes: the word is meant,
            # never a boolean, so the composer's YAML 1.1 boolean finding is withdrawn.
            self._withdraw(node, "bad_boolean")
            return str(node.value)
        if not (isinstance(node, ScalarNode) and node.tag == STR_TAG):
            self.wrong_type(node, path, f"one of {expected}")
            return None
        text = str(node.value)
        if text not in choices:
            hint = suggest(text, choices)
            self.error(node, "bad_value", f"{path} must be one of {expected}, got {text!r}{hint}")
            return None
        return text


def _integer_kind(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer from {minimum} to {maximum}"
    if minimum is not None:
        return "a non-negative integer" if minimum == 0 else f"an integer of at least {minimum}"
    if maximum is not None:
        return f"an integer up to {maximum}"
    return "an integer"


def boolean_field(default: bool) -> Field:
    return Field(lambda w, n, p: w.boolean(n, p), default)


def string_field(default: str | None = None, *, required: bool = False) -> Field:
    return Field(lambda w, n, p: w.string(n, p), default, required)


def integer_field(
    default: int | None, *, minimum: int | None = None, maximum: int | None = None
) -> Field:
    return Field(lambda w, n, p: w.integer(n, p, minimum=minimum, maximum=maximum), default)


def number_field(
    default: float | None, *, positive: bool = False, maximum: float | None = None
) -> Field:
    return Field(lambda w, n, p: w.number(n, p, positive=positive, maximum=maximum), default)


def choice_field(default: str | None, choices: tuple[str, ...]) -> Field:
    return Field(lambda w, n, p: w.choice(n, p, choices), default)


def section_field(fields: Mapping[str, Field]) -> Field:
    """A nested mapping; its value is the nested Section."""
    return Field(lambda w, n, p: w.mapping(n, fields, path=p), None, read_absent=True)


def text_field(
    default: str | None, *, max_length: int, printable: bool = True, note: str = ""
) -> Field:
    return Field(
        lambda w, n, p: w.text(n, p, max_length=max_length, printable=printable, note=note),
        default,
    )


def port_list_field(default: tuple[int, ...], *, duplicates: Severity) -> Field:
    """A list of TCP ports (1 to 65535), each once; see `Walker.unique_items`."""

    def read(w: Walker, node: Node, path: str) -> tuple[int, ...] | None:
        return w.unique_items(
            node,
            path,
            lambda item, where: w.integer(item, where, minimum=1, maximum=65535),
            duplicates=duplicates,
            shown=lambda port, _: f"port {port}",
        )

    return Field(read, default)
