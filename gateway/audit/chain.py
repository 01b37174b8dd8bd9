"""The audit chain's wire format, shared by the writer and the verifier: line hashing, lifecycle
actions and fields, timestamps, and the signed checkpoint payload. No file I/O here.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeGuard

import orjson

# A record longer than this is refused by the writer and treated as garbage by the readers,
# so a hostile or corrupt file never makes them hold an unbounded line in memory.
MAX_LINE_BYTES = 1024 * 1024

REDACTED = "REDACTED"


class AuditAction(StrEnum):
    """The `event.action` values the log itself writes; callers write the others."""

    LOG_START = "log_start"
    LOG_ROTATE = "log_rotate"
    CHECKPOINT = "checkpoint"


LIFECYCLE_ACTIONS = frozenset(AuditAction)


def line_hash(line: bytes) -> str:
    """Hex SHA-256 of a line's exact bytes without its newline: the next record's `chain.prev`."""
    return hashlib.sha256(line).hexdigest()


def format_timestamp(seconds: float) -> str:
    """ECS `@timestamp`: UTC, millisecond precision, `Z` suffix."""
    millis = int(seconds * 1000)
    whole, ms = divmod(millis, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{ms:03d}Z"


@dataclass(frozen=True, slots=True)
class CheckpointPayload:
    """What a checkpoint signs: the chain head it vouches for, and the checkpoint before it.

    `seq` and `head` are the seq and line hash of the last record before the checkpoint line;
    `records` counts the records this process run had written up to that head;
    `prev_checkpoint` is the SHA-256 of the previous checkpoint's payload bytes in this run
    (null for a run's first checkpoint).
    """

    origin: str
    seq: int
    head: str
    records: int
    prev_checkpoint: str | None
    issued_at: str
    file: str | None

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {
                "origin": self.origin,
                "seq": self.seq,
                "head": self.head,
                "records": self.records,
                "prev_checkpoint": self.prev_checkpoint,
                "issued_at": self.issued_at,
                "file": self.file,
            },
            option=orjson.OPT_SORT_KEYS,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> CheckpointPayload:
        """Raises ValueError on anything but a well-formed payload."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError("checkpoint payload is not JSON") from exc
        if not isinstance(obj, dict):
            raise ValueError("checkpoint payload is not a JSON object")
        origin = obj.get("origin")
        seq = obj.get("seq")
        head = obj.get("head")
        records = obj.get("records")
        prev = obj.get("prev_checkpoint")
        issued_at = obj.get("issued_at")
        file = obj.get("file")
        if not isinstance(origin, str):
            raise ValueError("checkpoint payload: origin is not a string")
        if not _is_int(seq) or seq < 1:
            raise ValueError("checkpoint payload: seq is not a positive integer")
        if not is_sha256_hex(head):
            raise ValueError("checkpoint payload: head is not a hex SHA-256")
        if not _is_int(records) or records < 0:
            raise ValueError("checkpoint payload: records is not a count")
        if prev is not None and not is_sha256_hex(prev):
            raise ValueError("checkpoint payload: prev_checkpoint is not a hex SHA-256")
        if not isinstance(issued_at, str):
            raise ValueError("checkpoint payload: issued_at is not a string")
        if file is not None and not isinstance(file, str):
            raise ValueError("checkpoint payload: file is not a string")
        return cls(origin, seq, head, records, prev, issued_at, file)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_sha256_hex(value: object) -> TypeGuard[str]:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


@dataclass(frozen=True, slots=True)
class ChainLink:
    """A record's `chain` field, validated."""

    seq: int
    prev: str | None


def chain_link(record: Any) -> ChainLink | None:
    """The record's validated chain link, or None when it has none (not a chain record)."""
    if not isinstance(record, dict):
        return None
    chain = record.get("chain")
    if not isinstance(chain, dict):
        return None
    seq = chain.get("seq")
    prev = chain.get("prev")
    if not _is_int(seq) or seq < 1:
        return None
    if prev is not None and not is_sha256_hex(prev):
        return None
    return ChainLink(seq, prev)


def record_action(record: dict[str, Any]) -> str | None:
    event = record.get("event")
    if isinstance(event, dict):
        action = event.get("action")
        if isinstance(action, str):
            return action
    return None
