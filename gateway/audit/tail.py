"""`audit tail`: the last records of a log and, when following, each new one as it is written,
across rotations (the path is reopened when it names a new file) and truncation. Polls the file;
holds at most one partial line and the requested backlog in memory.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from gateway.audit.chain import MAX_LINE_BYTES
from gateway.audit.fields import (
    action_of,
    client_of,
    disposition_of,
    domain_of,
    int_field,
    is_lifecycle,
    section,
    text_field,
    url_of,
)
from gateway.audit.terminal import printable

RecordFilter = Callable[[Mapping[str, Any]], bool]

_READ_CHUNK = 64 * 1024


def record_filter(*, client: str | None = None, disposition: str | None = None) -> RecordFilter:
    def matches(record: Mapping[str, Any]) -> bool:
        if client is not None and client_of(record) != client:
            return False
        return disposition is None or (
            not is_lifecycle(record) and disposition_of(record) == disposition
        )

    return matches


def tail_records(
    path: str,
    *,
    backlog: int = 10,
    follow: bool = False,
    matches: RecordFilter = lambda record: True,
    poll_interval: float = 0.25,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[dict[str, Any]]:
    """The last `backlog` matching records, then (following) each new matching record until
    `stop()` is true. Raises FileNotFoundError when not following and the file is missing."""
    reader = _FollowedFile(path)
    if not follow:
        reader.open_now()
    elif not reader.wait_open(poll_interval, stop):
        return
    recent: deque[dict[str, Any]] = deque(maxlen=max(0, backlog))
    for record in reader.read_available():
        if matches(record):
            recent.append(record)
    yield from recent
    recent.clear()
    if not follow:
        reader.close()
        return
    try:
        while not stop():
            got_any = False
            for record in reader.read_available():
                got_any = True
                if matches(record):
                    yield record
            if got_any:
                continue
            drained = reader.reopen_if_replaced()
            if drained is None:
                time.sleep(poll_interval)
                continue
            for record in drained:
                if matches(record):
                    yield record
    finally:
        reader.close()


class _FollowedFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.handle: Any = None
        self.identity: tuple[int, int] | None = None
        self.partial = bytearray()
        self.discarding = False  # inside a line longer than the record limit

    def open_now(self) -> None:
        self.handle = open(self.path, "rb")  # noqa: SIM115 -- closed by close()
        stat = os.fstat(self.handle.fileno())
        self.identity = (stat.st_dev, stat.st_ino)

    def wait_open(self, poll_interval: float, stop: Callable[[], bool]) -> bool:
        while not stop():
            try:
                self.open_now()
                return True
            except FileNotFoundError:
                time.sleep(poll_interval)
        return False

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def read_available(self) -> Iterator[dict[str, Any]]:
        while self.handle is not None:
            chunk = self.handle.read(_READ_CHUNK)
            if not chunk:
                return
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                if end == -1:
                    self._keep(chunk[start:])
                    break
                self._keep(chunk[start:end])
                line, discarded = bytes(self.partial), self.discarding
                self.partial.clear()
                self.discarding = False
                start = end + 1
                record = None if discarded else _parse(line)
                if record is not None:
                    yield record

    def _keep(self, piece: bytes) -> None:
        if self.discarding:
            return
        self.partial += piece
        if len(self.partial) > MAX_LINE_BYTES:
            self.partial.clear()
            self.discarding = True

    def reopen_if_replaced(self) -> list[dict[str, Any]] | None:
        """After reaching the end: None when nothing changed; else the path now names another
        file (rotated) or the file shrank (truncated), reading starts over from the beginning
        of the file, and the result holds the old file's last records written meanwhile."""
        if self.handle is None:
            try:
                self.open_now()
            except FileNotFoundError:
                return None
            return []
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        if (stat.st_dev, stat.st_ino) != self.identity:
            drained = list(self.read_available())
            self.close()
            try:
                self.open_now()
            except FileNotFoundError:
                return drained
            finally:
                self.partial.clear()
                self.discarding = False
            return drained
        if stat.st_size < self.handle.tell():
            self.handle.seek(0)
            self.partial.clear()
            self.discarding = False
            return []
        return None


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def format_record(record: Mapping[str, Any]) -> str:
    """One terminal-safe line: time, client, action, disposition, status, domain, URL, rule and
    reason (for lifecycle records: seq and what they name)."""
    timestamp = printable(record.get("@timestamp"), 40)
    action = printable(action_of(record), 32)
    chain = section(record, "chain")
    if is_lifecycle(record):
        audit = section(record, "audit")
        detail = [f"seq={printable(chain.get('seq'), 20)}"]
        for key in ("file", "previous_file"):
            value = text_field(audit, key)
            if value:
                detail.append(f"{key}={printable(value, 120)}")
        checkpoint = section(record, "checkpoint")
        if checkpoint:
            detail.append(f"covers={printable(checkpoint.get('seq'), 20)}")
        return "  ".join([timestamp, action, *detail])
    policy = section(record, "policy")
    status = int_field(section(section(record, "http"), "response"), "status_code")
    fields = [
        timestamp,
        printable(client_of(record), 40),
        action,
        disposition_of(record).value,
        str(status) if status else "-",
        printable(domain_of(record), 100),
        printable(url_of(record), 300),
        printable(text_field(policy, "rule"), 60),
    ]
    reason = text_field(policy, "reason")
    if reason:
        fields.append(printable(reason, 60))
    return "  ".join(fields)
