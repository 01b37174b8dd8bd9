"""Reading an audit file from its end: complete lines newest first, in chunks that start small
(the newest page needs a few KB) and grow to a few MB (a filtered scan of a large file), with
the search for literal byte strings done by `bytes.rfind` over each chunk, as `grep -F` would,
so only lines that can match are parsed. Memory: one chunk, plus at most one line carried over.

Also finds, by bisection, where the records newer than a given time begin, since each chain's
records are written in time order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

import orjson

from gateway.audit.chain import MAX_LINE_BYTES
from gateway.audit.fields import parse_timestamp

FIRST_CHUNK = 64 * 1024
MAX_CHUNK = 4 * 1024 * 1024
_TIMESTAMP_PREFIX = b'{"@timestamp":"'  # how the writer starts every line


def lines_backwards(
    path: str, *, begin: int = 0, end: int | None = None, needles: Sequence[bytes] = ()
) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) for each complete line that starts at or after
    `begin` (a line's start) and ends before `end` (default: the end of the file), newest
    first. A last line without its newline (being written, or torn) and lines over the record
    limit are skipped. With `needles`, only lines holding at least one of them."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        yield from _scan(handle, begin, size if end is None else min(end, size), needles)


def _scan(
    handle: BinaryIO, begin: int, pos: int, needles: Sequence[bytes]
) -> Iterator[tuple[int, bytes]]:
    chunk = FIRST_CHUNK
    carry = b""  # the start of a line that began before `pos`, its newline included
    while pos > begin:
        start = max(begin, pos - chunk)
        chunk = min(chunk * 2, MAX_CHUNK)
        handle.seek(start)
        buffer = handle.read(pos - start) + carry
        pos = start
        carry = b""
        if start > begin:
            cut = buffer.find(b"\n")
            if cut == -1:
                # Wholly inside a line being dropped: the unterminated last line, or one
                # longer than the record limit.
                continue
            region, base = buffer[cut + 1 :], start + cut + 1
            if cut < MAX_LINE_BYTES + 1:
                carry = buffer[: cut + 1]
        else:
            region, base = buffer, begin
        if region and not region.endswith(b"\n"):
            # The end is the piece of a dropped line (see above): keep whole lines only.
            region = region[: region.rfind(b"\n") + 1]
        if needles:
            yield from _matching_lines(region, base, needles)
        else:
            yield from _all_lines(region, base)


def _all_lines(region: bytes, base: int) -> Iterator[tuple[int, bytes]]:
    end = len(region) - 1  # the newline that ends the region's last line
    while end >= 0:
        start = region.rfind(b"\n", 0, end) + 1
        if end > start and end - start <= MAX_LINE_BYTES:
            yield base + start, region[start:end]
        end = start - 1


def _matching_lines(
    region: bytes, base: int, needles: Sequence[bytes]
) -> Iterator[tuple[int, bytes]]:
    """Lines holding any needle, newest first: each needle's last hit before `limit` is kept,
    so each one scans the region once whatever the number of lines."""
    limit = len(region)
    hits = [region.rfind(needle, 0, limit) for needle in needles]
    while True:
        hit = max(hits)
        if hit < 0:
            return
        start = region.rfind(b"\n", 0, hit) + 1
        end = region.find(b"\n", hit)
        if end - start <= MAX_LINE_BYTES:
            yield base + start, region[start:end]
        limit = start
        hits = [
            h if h < start else region.rfind(needle, 0, limit)
            for h, needle in zip(hits, needles, strict=True)
        ]


def line_timestamp(line: bytes) -> float | None:
    """The line's `@timestamp` in seconds, read from the writer's fixed prefix when it is
    there (no parse of the whole record), else from the parsed record."""
    if line.startswith(_TIMESTAMP_PREFIX):
        close = line.find(b'"', len(_TIMESTAMP_PREFIX))
        if close > 0:
            try:
                text = line[len(_TIMESTAMP_PREFIX) : close].decode("ascii")
            except UnicodeDecodeError:
                return None
            return parse_timestamp(text)
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    value = record.get("@timestamp") if isinstance(record, dict) else None
    return parse_timestamp(value) if isinstance(value, str) else None


def offset_after(path: str, moment: float) -> int:
    """Where the lines written after `moment` begin: the offset of the first line whose
    timestamp is later, or the file's size. Bisects the file (a few dozen short reads)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        return _bisect(handle, size, lambda ts: ts is not None and ts > moment)


def _bisect(handle: BinaryIO, size: int, later: Callable[[float | None], bool]) -> int:
    low, high = 0, size  # the answer is the line starting at or after some pos in [low, high]
    while low < high:
        middle = (low + high) // 2
        found = _line_from(handle, middle)
        if found is None or later(line_timestamp(found[1])):
            high = middle
        else:
            low = middle + 1
    found = _line_from(handle, low)
    return size if found is None else found[0]


def _line_from(handle: BinaryIO, pos: int) -> tuple[int, bytes] | None:
    """The first complete line starting at or after `pos`."""
    if pos > 0:
        handle.seek(pos - 1)
        skipped = handle.readline(MAX_LINE_BYTES + 2)
        while skipped and not skipped.endswith(b"\n"):
            skipped = handle.readline(MAX_LINE_BYTES + 2)
        if not skipped:
            return None
    else:
        handle.seek(0)
    start = handle.tell()
    line = handle.readline(MAX_LINE_BYTES + 2)
    if not line.endswith(b"\n"):
        return None
    return start, line[:-1]
