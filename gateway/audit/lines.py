"""Reading audit files line by line in bounded memory: each line's number, offset, exact hash,
and its bytes unless longer than the record limit. Shared by recovery, verify, summary and tail.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from gateway.audit.chain import MAX_LINE_BYTES


@dataclass(frozen=True, slots=True)
class RawLine:
    number: int  # 1-based, within its file
    offset: int  # of the line's first byte
    length: int  # without the newline
    sha256: str  # of the exact bytes, without the newline
    data: bytes | None  # None when longer than MAX_LINE_BYTES (never a valid record)
    terminated: bool  # False only for a last line cut short


def iter_lines(handle: BinaryIO, *, first_number: int = 1, offset: int = 0) -> Iterator[RawLine]:
    number = first_number - 1
    while True:
        hasher = hashlib.sha256()
        kept = bytearray()
        length = 0
        terminated = False
        while True:
            chunk = handle.readline(MAX_LINE_BYTES + 1)
            if not chunk:
                break
            length += len(chunk)
            if chunk.endswith(b"\n"):
                terminated = True
                chunk = chunk[:-1]
            hasher.update(chunk)
            if len(kept) <= MAX_LINE_BYTES:
                kept += chunk[: MAX_LINE_BYTES + 1 - len(kept)]
            if terminated:
                break
        if length == 0:
            return
        number += 1
        content = length - 1 if terminated else length
        data = bytes(kept) if content <= MAX_LINE_BYTES else None
        yield RawLine(number, offset, content, hasher.hexdigest(), data, terminated)
        offset += length
