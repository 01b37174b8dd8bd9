"""`audit tail`: the last records of a log and, when following, each new one as it is written,
across rotations (the path is reopened when it names a new file) and truncation. Given a folder
or a glob, the newest chain file (by modification time, checkpoint copies left out), and when
following, the next one as it starts: a file that appears after following began (a new chain,
a restart under another instance id) takes over from the one followed. Polls; holds at most
one partial line and the requested backlog in memory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from gateway.audit.chain import MAX_LINE_BYTES
from gateway.audit.chains import expand_paths, is_checkpoint_copy
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


def names_a_set(path: str) -> bool:
    """Whether `path` is a folder or a glob (the newest of the files it names is followed)
    rather than one file."""
    return os.path.isdir(path) or (glob.has_magic(path) and not os.path.lexists(path))


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
    `stop()` is true. `path` is a file, or a folder or glob (its newest chain file, and when
    following the next one as it appears). Raises FileNotFoundError when not following and
    there is no file."""
    newest = _NewestLog(path) if names_a_set(path) else None
    if newest is None:
        reader = _FollowedFile(path)
    else:
        first = newest.pick()
        if first is None and not follow:
            raise FileNotFoundError(path)
        while first is None:
            if stop():
                return
            time.sleep(poll_interval)
            first = newest.pick()
        reader = _FollowedFile(first)
    if not follow:
        reader.open_now()
    elif not reader.wait_open(poll_interval, stop):
        return
    if newest is not None:
        newest.followed(reader)
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
            if drained is None and newest is not None:
                arrival = newest.arrival()
                if arrival is not None:  # a new chain started: finish the old file, move on
                    drained = list(reader.read_available())
                    reader.close()
                    reader = _FollowedFile(arrival)
                    with contextlib.suppress(FileNotFoundError):  # gone: tried again next
                        reader.open_now()
            if drained is None:
                time.sleep(poll_interval)
                continue
            if newest is not None and reader.handle is not None:
                newest.followed(reader)
            for record in drained:
                if matches(record):
                    yield record
    finally:
        reader.close()


class _NewestLog:
    """The files a folder or glob names, for following its newest chain: every file seen is
    remembered (by device and inode, so a rotated file keeps its identity under its new name),
    and only a file never seen before counts as a new chain."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.seen: set[tuple[int, int]] = set()

    def _files(self) -> list[tuple[float, str, tuple[int, int]]]:
        found = []
        for name in expand_paths([self.pattern])[0]:
            try:
                stat = os.stat(name)
            except OSError:
                continue
            if os.path.isfile(name):
                found.append((stat.st_mtime, name, (stat.st_dev, stat.st_ino)))
        return found

    def pick(self) -> str | None:
        """The newest log file now (None: none yet); every file present counts as seen."""
        files = self._files()
        self.seen.update(identity for _, _, identity in files)
        logs = [(mtime, name) for mtime, name, _ in files if not is_checkpoint_copy(name)]
        return max(logs)[1] if logs else None

    def arrival(self) -> str | None:
        """The newest file that appeared since the last look (None: none did)."""
        fresh = [(m, n, i) for m, n, i in self._files() if i not in self.seen]
        if not fresh:
            return None
        self.seen.update(identity for _, _, identity in fresh)
        logs = [(mtime, name) for mtime, name, _ in fresh if not is_checkpoint_copy(name)]
        return max(logs)[1] if logs else None

    def followed(self, reader: _FollowedFile) -> None:
        if reader.identity is not None:
            self.seen.add(reader.identity)


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
