"""Strict YAML with positions: bytes -> one composed `Document`, every problem an `Issue`.

Owns the hazards of YAML written by people (duplicate keys, YAML 1.1 booleans, tags, alias
bombs, deep nesting, huge or binary files). Walking the nodes against a schema is
`walk.py`'s. Generic (the gateway configuration reuses it); never a traceback.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

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

from gateway.yamlstrict.issues import Issue, Mark, SourceError, issue_at

# The tags PyYAML's resolver gives plain scalars (YAML 1.1 rules; see walk.py's `Walker.boolean`).
BOOL_TAG = "tag:yaml.org,2002:bool"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
NULL_TAG = "tag:yaml.org,2002:null"
STR_TAG = "tag:yaml.org,2002:str"
MERGE_TAG = "tag:yaml.org,2002:merge"

DEFAULT_MAX_BYTES = 1 << 20
MAX_DEPTH = 64  # policies nest three levels; this only stops `[[[[…` from exhausting the stack
MAX_ALIASES = 100
MAX_ALIAS_NODES = 10_000  # nodes that aliases may add by reference (billion laughs: 10^9)


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
        raise SourceError((issue_at(source, exc.mark, exc.code, exc.message),)) from None
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
        raise SourceError((issue_at(source, mark, code, message),)) from None
    except (YAMLError, RecursionError) as exc:  # belt and braces: never a traceback
        raise SourceError(
            (Issue(source, 1, 1, "yaml_syntax", str(exc) or "malformed YAML"),)
        ) from None
    found = [issue_at(source, mark, code, message) for mark, code, message in composer.found]
    return Document(source, root, tuple(found), frozenset(composer.reported))


def _char_position(text: str, index: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1

