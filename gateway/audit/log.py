"""The audit log writer: one hash-chained JSON line per record, an exclusive lock per
file, torn-tail recovery at start, size rotation and signed checkpoints. Synchronous on purpose:
a record is one write() to the operating system. Every failure is an AuditWriteError, never a
silently dropped record; the writer must not decide anything about the requests it records.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.audit.chain import (
    MAX_LINE_BYTES,
    AuditAction,
    CheckpointPayload,
    chain_link,
    format_timestamp,
    line_hash,
)
from gateway.audit.lines import RawLine, iter_lines
from gateway.audit.redaction import redact_url
from gateway.audit.repair import repair_record
from gateway.errors import AuditWriteError
from gateway.provenance.dsse import CHECKPOINT_PAYLOAD_TYPE, DSSEError, Signer, sign_many

logger = logging.getLogger(__name__)

STDOUT_PATH = "-"
# How many lines at the end of an existing file may be torn or foreign before the writer
# refuses to continue the chain (such a file is not one of ours, or badly damaged).
_RECOVERY_WINDOW = 16
_FILE_MODE = 0o640
_LOCK_ATTEMPTS = 8
# A repaired record's strings are cut to this many characters (a second try: to the short).
_REPAIR_LIMIT = 8192
_REPAIR_LIMIT_SHORT = 512
# A log that could not be written is tried again (a small file beside it, and the free space
# of its file system) at most this often, by the requests it refuses, /readyz and the tick.
PROBE_INTERVAL = 1.0
# Free space under which the next record is not expected to fit: requests are refused before
# they leave, not after (a record is rarely over a few KB; one may be up to MAX_LINE_BYTES).
FREE_SPACE_RESERVE = 64 * 1024
_PROBE_BYTES = 4096


def _torn_entry(line: RawLine, file: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "line": line.number,
        "offset": line.offset,
        "bytes": line.length,
        "sha256": line.sha256,
    }
    if file is not None:
        entry["file"] = file
    return entry


@dataclass(frozen=True, slots=True)
class _Recovered:
    seq: int
    head: str
    torn: tuple[RawLine, ...]
    missing_newline: bool


class AuditLog:
    """The chained audit log of one process (one `instance_id`, one chain).

    `path` may contain `{instance}`; `-` is standard output (a new chain each start, no lock,
    no recovery, no rotation), as is any existing path that is not a regular file.
    """

    def __init__(
        self,
        path: str,
        *,
        instance_id: str,
        version: str,
        fsync: bool = False,
        rotate_bytes: int = 104857600,
        signer: Signer | None = None,
        checkpoints_path: str | None = None,
        checkpoint_interval: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.instance_id = instance_id
        self.version = version
        self.path = path if path == STDOUT_PATH else path.replace("{instance}", instance_id)
        self.checkpoints_path = (
            checkpoints_path.replace("{instance}", instance_id) if checkpoints_path else None
        )
        self._fsync = fsync
        self._rotate_bytes = max(1, int(rotate_bytes))
        self._signer = signer
        self._checkpoint_interval = float(checkpoint_interval)
        self._clock = clock
        self._observer = {"name": instance_id, "version": version}

        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._lock_path: str | None = None
        self._stream = False
        self._size = 0
        self._seq = 0
        self._head: str | None = None
        self._run_records = 0
        self._last_checkpoint_hash: str | None = None
        self._last_checkpoint: dict[str, Any] | None = None
        self._last_checkpoint_at = 0.0
        self._pending_rotate_record: dict[str, Any] | None = None
        self._broken: str | None = None
        # Set while records cannot be written (a full disk, an I/O error, a record that would
        # not serialise); cleared by the next record written or a probe that succeeds.
        self._failing: str | None = None
        self._failing_since = 0.0
        self._failed_writes = 0
        self._next_probe = 0.0
        self._last_line = b""
        self._stamp_second = -1
        self._stamp_prefix = ""

    # -- public interface -------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """The seq of the last record written (0 before the first)."""
        return self._seq

    @property
    def head(self) -> str | None:
        """The hex SHA-256 of the last line written: the chain head."""
        return self._head

    @property
    def signing(self) -> bool:
        return self._signer is not None

    def status(self) -> dict[str, Any]:
        """What `/v1/status` shows about the log."""
        return {
            "path": self.path,
            "seq": self._seq,
            "head": self._head,
            "signing": self._signer is not None,
            "keyid": self._signer.keyid if self._signer else None,
            "last_checkpoint": dict(self._last_checkpoint) if self._last_checkpoint else None,
            "healthy": self.healthy,
            "error": self._broken or self._failing or (None if self._fd else "not open"),
        }

    @property
    def healthy(self) -> bool:
        """Open, not broken, and its last write (or probe) succeeded. An unhealthy log is
        probed again (at most every PROBE_INTERVAL) when asked, so it recovers by itself."""
        if self._failing is not None:
            self.probe()
        return self._fd is not None and self._broken is None and self._failing is None

    def preflight(self, record: Mapping[str, Any] | None = None) -> None:
        """Before a request leaves: raise AuditWriteError unless its record can be written,
        i.e. the log is usable, its file system has room for a record, and `record` (the
        request-side part of its record, when given) serialises."""
        with self._mutex:
            self._ensure_usable()
            if self._failing is not None:
                self._probe_locked()
            if self._failing is None and not self._stream:
                self._check_free_space()
            if self._failing is not None:
                raise AuditWriteError(f"cannot write audit log {self.path}: {self._failing}")
        if record is not None:
            written = dict(record)
            written["observer"] = self._observer
            written["chain"] = {"seq": self._seq + 1, "prev": self._head}
            self._serialise(written)

    def probe(self) -> None:
        """Try again whether records can be written, if they could not (rate-limited)."""
        if self._failing is None:
            return
        with self._mutex:
            self._probe_locked()

    def open(self) -> None:
        """Take the lock, recover a torn tail, write `log_start` (and a checkpoint when signing)."""
        with self._mutex:
            if self._fd is not None:
                raise AuditWriteError(f"audit log {self.path} is already open")
            self._broken = None
            try:
                self._open_locked()
            except BaseException:
                self._release()
                raise

    def append(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Write one record; returns it as written. Raises AuditWriteError on any failure."""
        with self._mutex:
            self._ensure_usable()
            try:
                if not self._stream and self._size >= self._rotate_bytes:
                    self._rotate_locked()
                if self._pending_rotate_record is not None:
                    self._write_record(self._pending_rotate_record)
                    self._pending_rotate_record = None
                written = self._write_record(record, redact=True)
            except AuditWriteError as exc:
                self._note_failure(exc.message)
                raise
            if self._failing is not None and (self._stream or self._free_space_problem() is None):
                # Recovered; a small record that still fit a nearly full disk is not that.
                self._note_success("a record was written")
            return written

    def checkpoint(self) -> dict[str, Any] | None:
        """Write a signed checkpoint now; None when the log has no signing key."""
        with self._mutex:
            self._ensure_usable()
            if self._signer is None:
                return None
            return self._checkpoint_locked([self._signer])

    def maybe_checkpoint(self) -> None:
        """Called every few seconds: a checkpoint once `checkpoint_interval` has passed, idle or
        not (an idle log's checkpoints prove it was silent). Failures are logged, not raised."""
        if self._signer is None or self._fd is None:
            return
        if self._clock() - self._last_checkpoint_at < self._checkpoint_interval:
            return
        try:
            self.checkpoint()
        except AuditWriteError as exc:
            logger.error("audit checkpoint failed: %s", exc)

    def rotate_key(self, new_signer: Signer) -> dict[str, Any]:
        """Switch signing keys: a transition checkpoint signed by the old and the new key, then
        the new key only. Old public keys keep verifying the checkpoints they signed."""
        with self._mutex:
            self._ensure_usable()
            signers = [new_signer] if self._signer is None else [self._signer, new_signer]
            written = self._checkpoint_locked(signers)
            self._signer = new_signer
            return written

    def close(self) -> None:
        """A final checkpoint when signing, then release the file and its lock."""
        with self._mutex:
            if self._fd is None:
                return
            try:
                if self._signer is not None and self._broken is None:
                    self._checkpoint_locked([self._signer])
            except AuditWriteError as exc:
                logger.error("final audit checkpoint failed: %s", exc)
            finally:
                self._release()

    def __enter__(self) -> AuditLog:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- opening and recovery ---------------------------------------------------------------

    def _open_locked(self) -> None:
        previous_file: str | None = None
        recovered: _Recovered | None = None
        try:
            if self.path == STDOUT_PATH:
                self._fd = os.dup(1)
                self._stream = True
            elif self._is_special_file(self.path):
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                self._stream = True
            else:
                directory = os.path.dirname(self.path)
                if directory:
                    os.makedirs(directory, exist_ok=True)
                self._take_lock()
                self._fd = os.open(
                    self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE
                )
                self._size = os.fstat(self._fd).st_size
                if self._size:
                    recovered = _recover(self.path)
                    if recovered is None:
                        raise AuditWriteError(
                            f"audit log {self.path} does not end in audit records (its last "
                            f"{_RECOVERY_WINDOW} lines are not chained JSON); refusing to "
                            "continue it: move it aside and start again"
                        )
                    if recovered.missing_newline:
                        self._write_bytes(b"\n")
                else:
                    previous_file, recovered = self._recover_from_rotated()
        except OSError as exc:
            raise AuditWriteError(f"cannot open audit log {self.path}: {_describe(exc)}") from exc

        audit: dict[str, Any] = {"instance_id": self.instance_id, "file": self._file_label()}
        if recovered is not None:
            self._seq, self._head = recovered.seq, recovered.head
            if previous_file is not None:
                audit["previous_file"] = previous_file
            if recovered.torn:
                audit["torn"] = [_torn_entry(line, previous_file) for line in recovered.torn]
        audit["pid"] = os.getpid()
        self._run_records = 0
        self._last_checkpoint_hash = None
        self._write_record(_lifecycle(AuditAction.LOG_START, ["start"], audit))
        if self._signer is not None:
            self._checkpoint_locked([self._signer])
        self._last_checkpoint_at = self._clock()

    @staticmethod
    def _is_special_file(path: str) -> bool:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return False
        return not stat.S_ISREG(mode)

    def _take_lock(self) -> None:
        """An exclusive lock on `PATH.lock`, which names the holder's pid. A clean exit
        removes the file (`_release`), so a lock file left behind means a crash or a writer
        still running; only a lock on the file the path still names counts, since a holder
        may remove it between our open and our flock."""
        lock_path = self.path + ".lock"
        for _ in range(_LOCK_ATTEMPTS):
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_small(fd).strip() or "unknown"
                os.close(fd)
                raise AuditWriteError(
                    f"audit log {self.path} is already being written by another process "
                    f"(pid {holder}, lock {lock_path}); give each process its own file: its own "
                    "instance_id, with {instance} in audit.path"
                ) from None
            except OSError:
                os.close(fd)
                raise
            if _same_file(fd, lock_path):
                break
            os.close(fd)
        else:
            raise AuditWriteError(f"cannot take the lock {lock_path}: it keeps being replaced")
        self._lock_fd = fd
        self._lock_path = lock_path
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def _recover_from_rotated(self) -> tuple[str | None, _Recovered | None]:
        """An empty or new file continues the newest rotated file's chain, if there is one (a
        crash between a rotation's rename and its first record must not start a new chain)."""
        newest = self._newest_rotated()
        if newest is None:
            return None, None
        recovered = _recover(os.path.join(os.path.dirname(self.path), newest))
        if recovered is None:
            return None, None
        return newest, recovered

    def _rotated_pattern(self) -> re.Pattern[str]:
        stem, suffix = os.path.splitext(os.path.basename(self.path))
        return re.compile(re.escape(stem) + r"\.(\d{12})(?:-(\d+))?" + re.escape(suffix))

    def _newest_rotated(self) -> str | None:
        pattern = self._rotated_pattern()
        best: tuple[int, int, str] | None = None
        for name in os.listdir(os.path.dirname(self.path) or "."):
            match = pattern.fullmatch(name)
            if match:
                key = (int(match.group(1)), int(match.group(2) or 0), name)
                if best is None or key > best:
                    best = key
        return best[2] if best else None

    # -- writing ----------------------------------------------------------------------------

    def _ensure_usable(self) -> None:
        if self._fd is None:
            raise AuditWriteError(f"audit log {self.path} is not open")
        if self._broken is not None:
            raise AuditWriteError(
                f"audit log {self.path} is unusable since an earlier failure ({self._broken}); "
                "restart the gateway"
            )

    def _write_record(self, record: Mapping[str, Any], *, redact: bool = False) -> dict[str, Any]:
        timestamp = record.get("@timestamp")
        written: dict[str, Any] = {
            "@timestamp": timestamp if isinstance(timestamp, str) else self._timestamp()
        }
        for key, value in record.items():
            if key not in _WRITER_KEYS:
                written[key] = value
        if redact:
            _redact_urls(written)
        written["observer"] = self._observer
        written["chain"] = {"seq": self._seq + 1, "prev": self._head}
        line, written = self._serialise(written)
        self._write_bytes(line + b"\n")
        self._seq += 1
        self._head = line_hash(line)
        self._run_records += 1
        self._last_line = line
        return written

    @staticmethod
    def _serialise(written: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """The record's line. A record that would not serialise, or would be too long, is
        repaired (`audit.repair`) and names what was changed in `repaired`; one that even
        so cannot be written raises AuditWriteError."""
        try:
            line = orjson.dumps(written)
            if len(line) <= MAX_LINE_BYTES:
                return line, written
            problem = f"{len(line)} bytes, over the {MAX_LINE_BYTES}-byte limit"
        except (orjson.JSONEncodeError, TypeError) as exc:
            problem = str(exc)
        for limit in (_REPAIR_LIMIT, _REPAIR_LIMIT_SHORT):
            repaired, paths = repair_record(written, limit=limit, max_items=limit // 8)
            chain = repaired.pop("chain")
            repaired["repaired"] = paths
            repaired["chain"] = chain  # the chain stays the last field, as on every line
            try:
                line = orjson.dumps(repaired)
            except (orjson.JSONEncodeError, TypeError) as exc:
                problem = str(exc)
                continue
            if len(line) <= MAX_LINE_BYTES:
                return line, repaired
            problem = f"{len(line)} bytes even repaired, over the {MAX_LINE_BYTES}-byte limit"
        raise AuditWriteError(f"audit record cannot be serialised: {problem}")

    # -- failing and recovering -------------------------------------------------------------

    def _note_failure(self, problem: str, *, wrote: bool = True) -> None:
        """One operational log line when writes start failing (not one per record)."""
        self._failed_writes += int(wrote)
        if self._failing is None:
            self._failing_since = self._clock()
            self._next_probe = time.monotonic() + PROBE_INTERVAL
            logger.error(
                "audit log cannot be written: every request is refused until it can",
                extra={"audit": self.path, "error": problem},
            )
        self._failing = problem

    def _note_success(self, how: str) -> None:
        if self._failing is None:
            return
        logger.warning(
            "audit log can be written again",
            extra={
                "audit": self.path,
                "how": how,
                "failed_writes": self._failed_writes,
                "failing_s": round(max(0.0, self._clock() - self._failing_since), 3),
            },
        )
        self._failing = None
        self._failed_writes = 0

    def _check_free_space(self) -> None:
        problem = self._free_space_problem()
        if problem is not None:
            self._note_failure(problem, wrote=False)

    def _free_space_problem(self) -> str | None:
        assert self._fd is not None
        try:
            stats = os.fstatvfs(self._fd)
        except OSError:
            return None  # no answer is not a full disk; the write itself will tell
        # Root may use the blocks kept for it; anyone else only those available to all.
        blocks = stats.f_bfree if os.geteuid() == 0 else stats.f_bavail
        free = blocks * stats.f_frsize
        if free >= FREE_SPACE_RESERVE:
            return None
        return f"its file system is full ({free} bytes free, {FREE_SPACE_RESERVE} needed)"

    def _probe_locked(self) -> None:
        """Whether a write would succeed now: the file system has room, and a small file
        beside the log can be written and removed. Never touches the log itself."""
        if self._failing is None or self._fd is None or self._stream:
            return
        now = time.monotonic()
        if now < self._next_probe:
            return
        self._next_probe = now + PROBE_INTERVAL
        if self._free_space_problem() is not None:
            return
        directory, name = os.path.split(self.path)
        probe = os.path.join(directory, f".{name}.probe")
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, bytes(_PROBE_BYTES))
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(probe)
        except OSError:
            return  # still failing, for the reason already logged
        self._note_success("a probe write succeeded")

    def _timestamp(self) -> str:
        """`format_timestamp(clock())`, with the date and time part formatted once a second
        (records come many to a second; strftime is most of a timestamp's cost)."""
        second, millis = divmod(int(self._clock() * 1000), 1000)
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp_prefix = format_timestamp(second)[: -len("000Z")]
        return f"{self._stamp_prefix}{millis:03d}Z"

    def _write_bytes(self, data: bytes) -> None:
        assert self._fd is not None
        written = 0
        try:
            view = memoryview(data)
            while written < len(data):
                count = os.write(self._fd, view[written:])
                if count <= 0:
                    raise OSError(errno.ENOSPC, "short write")
                written += count
            if self._fsync and not self._stream:
                os.fsync(self._fd)
        except OSError as exc:
            self._undo_partial_write(written, exc)
            raise AuditWriteError(f"cannot write audit log {self.path}: {_describe(exc)}") from exc
        self._size += len(data)

    def _undo_partial_write(self, written: int, exc: OSError) -> None:
        """Cut a half-written line off again so the next record starts on a clean line."""
        if self._stream:
            if written:
                self._broken = f"a record was cut short on the stream: {_describe(exc)}"
            return
        assert self._fd is not None
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as undo_exc:
            self._broken = (
                f"a failed write could not be undone: {_describe(exc)}; {_describe(undo_exc)}"
            )

    # -- checkpoints and rotation -----------------------------------------------------------

    def _checkpoint_locked(self, signers: list[Signer]) -> dict[str, Any]:
        assert self._head is not None
        payload = CheckpointPayload(
            origin=self.instance_id,
            seq=self._seq,
            head=self._head,
            records=self._run_records,
            prev_checkpoint=self._last_checkpoint_hash,
            issued_at=format_timestamp(self._clock()),
            file=self._file_label(),
        )
        payload_bytes = payload.to_bytes()
        try:
            envelope = sign_many(signers, payload_bytes, CHECKPOINT_PAYLOAD_TYPE)
        except DSSEError as exc:
            raise AuditWriteError(f"cannot sign audit checkpoint: {exc}") from exc
        record = _lifecycle(AuditAction.CHECKPOINT, ["info"], None)
        record["checkpoint"] = {
            "seq": payload.seq,
            "head": payload.head,
            "keyids": [signer.keyid for signer in signers],
            "dsse": envelope,
        }
        written = self._write_record(record)
        self._last_checkpoint_hash = hashlib.sha256(payload_bytes).hexdigest()
        self._last_checkpoint_at = self._clock()
        self._last_checkpoint = {"seq": payload.seq, "head": payload.head, "at": payload.issued_at}
        if self.checkpoints_path is not None:
            self._copy_checkpoint(self._last_line)
        return written

    def _copy_checkpoint(self, line: bytes) -> None:
        assert self.checkpoints_path is not None
        try:
            directory = os.path.dirname(self.checkpoints_path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            fd = os.open(
                self.checkpoints_path,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                _FILE_MODE,
            )
            try:
                os.write(fd, line + b"\n")
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise AuditWriteError(
                f"cannot write audit checkpoints file {self.checkpoints_path}: {_describe(exc)}"
            ) from exc

    def _rotate_locked(self) -> None:
        """Rename the full file aside, start a new one that opens with `log_rotate`."""
        assert self._fd is not None
        if self._signer is not None:
            self._checkpoint_locked([self._signer])
        rotated = self._free_rotated_name()
        rotated_path = os.path.join(os.path.dirname(self.path), rotated)
        try:
            os.rename(self.path, rotated_path)
        except OSError as exc:
            raise AuditWriteError(f"cannot rotate audit log {self.path}: {_describe(exc)}") from exc
        try:
            new_fd = os.open(
                self.path,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                _FILE_MODE,
            )
        except OSError as exc:
            try:
                os.rename(rotated_path, self.path)
            except OSError as undo_exc:
                self._broken = f"rotation failed half-way: {_describe(undo_exc)}"
            raise AuditWriteError(
                f"cannot start a new audit log file {self.path}: {_describe(exc)}"
            ) from exc
        os.close(self._fd)
        self._fd = new_fd
        self._size = 0
        if self._fsync:
            _fsync_directory(os.path.dirname(self.path) or ".")
        audit = {
            "instance_id": self.instance_id,
            "file": self._file_label(),
            "previous_file": rotated,
            "previous_last_line_sha256": self._head,
        }
        # If this write fails the next append writes it first: no file starts without it.
        self._pending_rotate_record = _lifecycle(AuditAction.LOG_ROTATE, ["change"], audit)
        self._write_record(self._pending_rotate_record)
        self._pending_rotate_record = None

    def _free_rotated_name(self) -> str:
        stem, suffix = os.path.splitext(os.path.basename(self.path))
        directory = os.path.dirname(self.path)
        name = f"{stem}.{self._seq:012d}{suffix}"
        counter = 0
        while os.path.lexists(os.path.join(directory, name)):
            counter += 1
            name = f"{stem}.{self._seq:012d}-{counter}{suffix}"
        return name

    def _file_label(self) -> str:
        return STDOUT_PATH if self.path == STDOUT_PATH else os.path.basename(self.path)

    def _release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            # Removed while still held: a writer that opens the path next makes a new file.
            if self._lock_path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self._lock_path)
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None
            self._lock_path = None
        self._stream = False


_WRITER_KEYS = frozenset({"@timestamp", "observer", "chain"})  # set by the writer, never copied


def _redact_urls(record: dict[str, Any]) -> None:
    """Redact a record's URLs in place; the caller's nested dicts are replaced, not changed.
    Callers redact too; doing it here as well makes the log the one choke point."""
    url = record.get("url")
    if isinstance(url, Mapping):
        url = dict(url)
        for key in ("original", "full"):
            if isinstance(url.get(key), str):
                url[key] = redact_url(url[key])
        record["url"] = url
    redirects = record.get("redirects")
    if isinstance(redirects, list):
        record["redirects"] = [
            {**hop, "url": redact_url(hop["url"])}
            if isinstance(hop, Mapping) and isinstance(hop.get("url"), str)
            else hop
            for hop in redirects
        ]


def _lifecycle(
    action: AuditAction, types: list[str], audit: dict[str, Any] | None
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "event": {"action": str(action), "kind": "event", "outcome": "success", "type": types}
    }
    if audit is not None:
        record["audit"] = audit
    return record


def _recover(path: str) -> _Recovered | None:
    """The chain head of an existing file, and the torn lines after it (a half-written last
    line, or lines no one can chain). None when no chained record ends the file."""
    lines = _last_lines(path, _RECOVERY_WINDOW + 1)
    torn: list[RawLine] = []
    missing_newline = bool(lines) and not lines[-1].terminated
    while lines:
        candidate = lines.pop()
        link = None
        if candidate.terminated and candidate.data is not None:
            try:
                link = chain_link(orjson.loads(candidate.data))
            except orjson.JSONDecodeError:
                link = None
        if link is not None:
            return _Recovered(link.seq, candidate.sha256, tuple(reversed(torn)), missing_newline)
        torn.append(candidate)
    return None


def _last_lines(path: str, count: int) -> list[RawLine]:
    with open(path, "rb") as handle:
        return list(deque(iter_lines(handle), maxlen=count))


def _same_file(fd: int, path: str) -> bool:
    try:
        held, named = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def _read_small(fd: int) -> str:
    try:
        return os.pread(fd, 64, 0).decode("ascii", "replace")
    except OSError:
        return ""


def _fsync_directory(directory: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)
