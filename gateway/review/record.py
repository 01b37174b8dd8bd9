"""One record in full, found by its file and offset (the timeline's links) or line number (the
chain view's first bad line): every field as a (path, value) row, its redirect chain, and the
hashes a reviewer checks it by (the line's own SHA-256, which the next record's `chain.prev`
must equal, the previous line's, the body hash, the policy's name and SHA-256).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.audit.chain import MAX_LINE_BYTES, line_hash
from gateway.review.files import AuditFolder

MAX_FIELDS = 2000  # rows shown of one record; a record is at most 1 MiB, but may nest deeply
_COUNT_CHUNK = 1 << 20


class RecordNotFoundError(LookupError):
    """No record there: an unknown file, or an offset or line that is not a record's start."""


@dataclass(frozen=True, slots=True)
class RecordView:
    file: str
    offset: int
    line_number: int | None  # known when the record was asked for by line
    line_sha256: str
    raw_bytes: int
    record: dict[str, Any] | None  # None when the line is not a JSON object
    fields: tuple[tuple[str, Any], ...]
    fields_cut: bool  # more than MAX_FIELDS rows

    @property
    def redirects(self) -> list[Mapping[str, Any]]:
        value = self.record.get("redirects") if self.record else None
        return [hop for hop in value if isinstance(hop, Mapping)] if isinstance(value, list) else []


def read_record(
    folder: AuditFolder, name: str, *, offset: int | None = None, line: int | None = None
) -> RecordView:
    file = folder.file(name)
    if file is None:
        raise RecordNotFoundError(f"{name!r} is not one of the audit folder's log files")
    with open(file.path, "rb") as handle:
        if line is not None:
            offset = _offset_of_line(handle, line)
        if offset is None or offset < 0:
            raise RecordNotFoundError("no such line")
        if offset > 0:
            handle.seek(offset - 1)
            if handle.read(1) != b"\n":
                raise RecordNotFoundError(f"offset {offset} is not the start of a line")
        handle.seek(offset)
        data = handle.readline(MAX_LINE_BYTES + 2)
    if not data:
        raise RecordNotFoundError(f"offset {offset} is past the end of {name}")
    data = data[:-1] if data.endswith(b"\n") else data
    record: Any = None
    try:
        record = orjson.loads(data) if len(data) <= MAX_LINE_BYTES else None
    except orjson.JSONDecodeError:
        record = None
    if not isinstance(record, dict):
        record = None
    shown = record if record is not None else data.decode("utf-8", "replace")
    rows = list(itertools.islice(_flatten(shown), MAX_FIELDS + 1))
    return RecordView(
        file=name,
        offset=offset,
        line_number=line,
        line_sha256=line_hash(data),
        raw_bytes=len(data),
        record=record,
        fields=tuple(rows[:MAX_FIELDS]),
        fields_cut=len(rows) > MAX_FIELDS,
    )


def _offset_of_line(handle: Any, line: int) -> int | None:
    """The offset of the 1-based line `line`, counting newlines chunk by chunk."""
    if line < 1:
        return None
    wanted = line - 1  # newlines before it
    seen = 0
    position = 0
    while True:
        chunk = handle.read(_COUNT_CHUNK)
        if not chunk:
            return None
        count = chunk.count(b"\n")
        if seen + count >= wanted:
            index = -1
            for _ in range(wanted - seen):
                index = chunk.index(b"\n", index + 1)
            return position + index + 1 if wanted else 0
        seen += count
        position += len(chunk)


def _flatten(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, scalar) rows; list items are `path[i]`."""
    if isinstance(value, Mapping):
        if not value:
            yield path or "(record)", {}
        for key, inner in value.items():
            yield from _flatten(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        if not value:
            yield path, []
        for index, inner in enumerate(value):
            yield from _flatten(inner, f"{path}[{index}]")
    else:
        yield path or "(line)", value
