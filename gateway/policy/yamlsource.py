"""Strict YAML with positions: bytes -> nodes -> checked values, every problem an `Issue`.

Owns the hazards of YAML written by people (duplicate keys, YAML 1.1 booleans, tags, alias
bombs, deep nesting, huge or binary files) and a schema walker with "did you mean" hints.
Generic (the gateway configuration reuses it); never constructs objects, never a traceback.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, cast

import yaml
from yaml.composer import Composer
from yaml.error import MarkedYAMLError, YAMLError
from yaml.events import (
    AliasEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader, ReaderError
from yaml.resolver import Resolver
from yaml.scanner import Scanner

DEFAULT_MAX_BYTES = 1 << 20
MAX_DEPTH = 64  # policies nest three levels; this only stops `[[[[…` from exhausting the stack
MAX_ALIASES = 100
MAX_ALIAS_NODES = 10_000  # nodes that aliases may add by reference (billion laughs: 10^9)

BOOL_TAG = "tag:yaml.org,2002:bool"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
NULL_TAG = "tag:yaml.org,2002:null"
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"

# YAML 1.1 spellings that some parsers read as booleans; only `true` and `false` are accepted.
YAML11_BOOLEANS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false"})
_DECIMAL_RE = re.compile(r"[-+]?[0-9]+\Z")
_NUMBER_RE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\Z")


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


def sort_issues(issues: list[Issue]) -> tuple[Issue, ...]:
    return tuple(sorted(issues, key=lambda i: (i.line, i.col, i.severity != Severity.ERROR)))


class SourceError(Exception):
    """The text could not be turned into a node tree; `issues` say why (usually one)."""

    def __init__(self, issues: tuple[Issue, ...]) -> None:
        super().__init__("\n".join(str(i) for i in issues))
        self.issues = issues


# --- reading -------------------------------------------------------------------------------


def read_bounded(path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The file's bytes, refusing (before reading it) anything larger than `max_bytes`."""
    source = os.fspath(path)
    try:
        # Non-blocking open, then regular files only: a FIFO must never hang a (re)load.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(descriptor, "rb") as handle:
            status = os.fstat(handle.fileno())
            if not stat.S_ISREG(status.st_mode):
                message = "not a regular file"
                raise SourceError((Issue(source, 1, 1, "unreadable", message),))
            if status.st_size > max_bytes:
                raise SourceError((_too_large(source, status.st_size, max_bytes),))
            data = handle.read(max_bytes + 1)  # the file may grow while we read
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SourceError(
            (Issue(source, 1, 1, "unreadable", f"cannot read the file: {reason}"),)
        ) from None
    if len(data) > max_bytes:
        raise SourceError((_too_large(source, None, max_bytes),))
    return data


def _too_large(source: str, size: int | None, max_bytes: int) -> Issue:
    got = f"{size} bytes" if size is not None else "more than that"
    return Issue(source, 1, 1, "file_too_large", f"file is larger than {max_bytes} bytes ({got})")


def decode_text(data: bytes, *, source: str) -> str:
    """UTF-8 text, or one SourceError for binary content (no flood of parser errors)."""
    nul = data.find(b"\x00")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _byte_position(data, exc.start)
        message = f"not UTF-8 text: invalid byte 0x{data[exc.start]:02x} at offset {exc.start}"
        if nul != -1 and nul < exc.start:
            line, col = _byte_position(data, nul)
            message = f"binary file: NUL byte at offset {nul}"
        raise SourceError((Issue(source, line, col, "binary_file", message),)) from None
    if nul != -1:
        line, col = _byte_position(data, nul)
        raise SourceError(
            (Issue(source, line, col, "binary_file", f"binary file: NUL byte at offset {nul}"),)
        )
    return text.removeprefix("\ufeff")


def _byte_position(data: bytes, offset: int) -> tuple[int, int]:
    line_start = data.rfind(b"\n", 0, offset) + 1
    col = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return data.count(b"\n", 0, offset) + 1, col


# --- composing -----------------------------------------------------------------------------


class _Abort(Exception):
    def __init__(self, mark: Mark | None, code: str, message: str) -> None:
        super().__init__(message)
        self.mark, self.code, self.message = mark, code, message


class _StrictComposition(Composer):
    """PyYAML's composer, counting what aliases add and checking keys as it goes. The events
    come from libyaml when PyYAML was built with it (about four times faster), else from
    PyYAML's own parser; the composition, and so every check, is the same Python code."""

    if TYPE_CHECKING:  # provided by the event source (libyaml's or PyYAML's parser)

        def peek_event(self) -> Any: ...
        def get_event(self) -> Any: ...
        def check_event(self, *choices: Any) -> bool: ...

    def _start(self) -> None:
        Composer.__init__(self)
        Resolver.__init__(self)  # type: ignore[arg-type]
        self.found: list[tuple[Mark | None, str, str]] = []
        self.reported: set[int] = set()  # ids of nodes whose problem is already in `found`
        self._sizes: dict[int, int] = {}
        self._depth = 0
        self._aliases = 0
        self._alias_nodes = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:
                if target.end_mark is None:  # still being composed: the alias is inside it
                    raise _Abort(
                        event.start_mark,
                        "alias_limit",
                        f"alias *{event.anchor} refers to a node that contains it",
                    )
                self._aliases += 1
                self._alias_nodes += self._size(target)
                if self._aliases > MAX_ALIASES or self._alias_nodes > MAX_ALIAS_NODES:
                    raise _Abort(
                        event.start_mark,
                        "alias_limit",
                        f"aliases expand to too much (limits: {MAX_ALIASES} aliases, "
                        f"{MAX_ALIAS_NODES} nodes added); write the values out instead",
                    )
            return cast(Node, super().compose_node(parent, index))
        tagged = isinstance(event, ScalarEvent | SequenceStartEvent | MappingStartEvent) and bool(
            event.tag
        )
        if tagged:
            message = f"explicit tag {event.tag!r} is not supported; remove it (quote a string)"
            self.found.append((event.start_mark, "unsupported_tag", message))
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Abort(event.start_mark, "too_deep", f"nesting deeper than {MAX_DEPTH} levels")
        node = cast(Node, super().compose_node(parent, index))
        self._depth -= 1
        if tagged:
            self.reported.add(id(node))
        if isinstance(node, ScalarNode):
            self._check_scalar(node)
        elif isinstance(node, MappingNode):
            self._check_keys(node)
        return node

    def _size(self, node: Node) -> int:
        """Nodes in the tree under `node` with aliases expanded, memoised: linear in the text."""
        size = self._sizes.get(id(node))
        if size is None:
            size = 1 + sum(self._size(child) for child in _children(node))
            self._sizes[id(node)] = size
        return size

    def _check_scalar(self, node: ScalarNode) -> None:
        if node.style == "":
            node.style = None  # libyaml's plain style; PyYAML's parser says None
        if node.tag == BOOL_TAG and node.value not in ("true", "false"):
            self.found.append(
                (
                    node.start_mark,
                    "bad_boolean",
                    f"{node.value!r} is a YAML 1.1 boolean; write true or false (quote a string)",
                )
            )

    def _check_keys(self, node: MappingNode) -> None:
        seen: dict[tuple[str, str], Node] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode):
                self.found.append(
                    (
                        key.start_mark,
                        "bad_key",
                        "a mapping key must be a plain value, not a list or mapping",
                    )
                )
                continue
            first = seen.setdefault((key.tag, key.value), key)
            if first is not key:
                where = f"{first.start_mark.line + 1}:{first.start_mark.column + 1}"
                self.found.append(
                    (
                        key.start_mark,
                        "duplicate_key",
                        f"duplicate key {key.value!r} (first at {where}); remove one",
                    )
                )


class _PurePythonComposer(_StrictComposition, Reader, Scanner, Parser, Resolver):
    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        self._start()


_Composer: Callable[[str], _StrictComposition] = _PurePythonComposer
if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _LibYAMLComposer(_StrictComposition, CParser, Resolver):
        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            self._start()

    _Composer = _LibYAMLComposer


def _children(node: Node) -> Iterator[Node]:
    if isinstance(node, SequenceNode):
        yield from node.value
    elif isinstance(node, MappingNode):
        for key, value in node.value:
            yield key
            yield value


@dataclass(frozen=True, slots=True)
class Document:
    """A composed document: the root node (None for an empty file) and the problems found
    while composing that do not stop the walk (duplicate keys, booleans, tags)."""

    source: str
    root: Node | None
    issues: tuple[Issue, ...]
    quiet: frozenset[int] = frozenset()  # ids of nodes already reported; walkers skip them


def compose(data: bytes, *, source: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Document:
    """Bytes -> one YAML document with positions; SourceError for what stops parsing."""
    if len(data) > max_bytes:
        raise SourceError((_too_large(source, len(data), max_bytes),))
    text = decode_text(data, source=source)
    try:
        composer = _Composer(text)
        composer.get_event()  # stream start
        root: Node | None = None
        if not composer.check_event(StreamEndEvent):
            root = composer.compose_document()
        if not composer.check_event(StreamEndEvent):
            mark = composer.peek_event().start_mark
            raise _Abort(
                mark,
                "multiple_documents",
                "more than one YAML document; a file holds exactly one (split it at the '---')",
            )
    except _Abort as exc:
        raise SourceError((_at(source, exc.mark, exc.code, exc.message),)) from None
    except ReaderError as exc:
        line, col = _char_position(text, exc.position)
        message = (
            f"control character #x{exc.character:04x} is not allowed in YAML"
            if isinstance(exc.character, int)
            else str(exc)
        )
        raise SourceError((Issue(source, line, col, "yaml_syntax", message),)) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = "; ".join(part for part in (exc.context, exc.problem) if part) or "malformed YAML"
        if exc.context == "while scanning an alias":
            # `- *.example.com` reads as an alias in YAML: the usual cause, with the fix.
            message += "; a value starting with '*' must be quoted, e.g. \"*.example.com\""
        if "nesting depth" in (exc.problem or ""):  # libyaml stops `[[[[…` itself, at 1000
            message, code = f"nesting deeper than {MAX_DEPTH} levels", "too_deep"
        else:
            code = "yaml_syntax"
        raise SourceError((_at(source, mark, code, message),)) from None
    except (YAMLError, RecursionError) as exc:  # belt and braces: never a traceback
        raise SourceError(
            (Issue(source, 1, 1, "yaml_syntax", str(exc) or "malformed YAML"),)
        ) from None
    found = [_at(source, mark, code, message) for mark, code, message in composer.found]
    return Document(source, root, tuple(found), frozenset(composer.reported))


def _at(source: str, mark: Mark | None, code: str, message: str) -> Issue:
    if mark is None:
        return Issue(source, 1, 1, code, message)
    return Issue(source, mark.line + 1, mark.column + 1, code, message)


def _char_position(text: str, index: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


# --- walking -------------------------------------------------------------------------------

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
        self.issues.append(
            _at(self.source, at.start_mark if at is not None else None, code, message)
        )

    def warning(self, at: Node | None, code: str, message: str) -> None:
        mark = at.start_mark if at is not None else None
        issue = _at(self.source, mark, code, message)
        self.issues.append(
            Issue(issue.file, issue.line, issue.col, code, message, Severity.WARNING)
        )

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

    def sequence(self, node: Node, path: str) -> list[Node] | None:
        if isinstance(node, SequenceNode):
            return list(node.value)
        self.wrong_type(node, path, "a list")
        return None

    def string(self, node: Node, path: str) -> str | None:
        if isinstance(node, ScalarNode) and node.tag == STR_TAG:
            return str(node.value)
        self.wrong_type(node, path, "a string")
        return None

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
