"""`audit verify`: walks one chain's files in order and reports each as valid or INVALID with
the reason and the first bad line; checks signed checkpoints in the log and in separate
checkpoint files. Reads only; never repairs anything.

What it proves: every record links to the one before it (`chain.prev` is the hash of the
previous line, `chain.seq` goes up by one), so an edited, deleted, inserted or reordered
record breaks the chain where it happened. What it cannot prove without checkpoints: that
records were not cut off the end (the tail after the last signed checkpoint).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway.audit.chain import (
    AuditAction,
    ChainLink,
    CheckpointPayload,
    chain_link,
    is_sha256_hex,
    record_action,
)
from gateway.audit.lines import RawLine, iter_lines
from gateway.provenance.dsse import CHECKPOINT_PAYLOAD_TYPE, DSSEError, verify_dsse


@dataclass(frozen=True, slots=True)
class FileReport:
    path: str
    valid: bool
    reason: str | None = None
    line: int | None = None  # the first bad line, 1-based
    records: int = 0  # chained records accepted in this file
    first_seq: int | None = None
    last_seq: int | None = None
    checkpoints: int = 0  # checkpoints found in this file (verified when keys were given)
    warnings: tuple[str, ...] = ()
    kind: str = "log"  # "log" or "checkpoints"
    # Keys were given, the chain is intact, but it holds no checkpoint at all: no key vouches
    # for it (written before signing was turned on). Not INVALID, and not valid either.
    unsigned: bool = False

    def describe(self) -> str:
        """`valid`, `UNSIGNED: …` or `INVALID: reason (line N)`, as `gateway audit verify`
        prints it."""
        if self.valid and self.unsigned:
            return (
                "UNSIGNED: the chain is intact but holds no checkpoint, so no key vouches for "
                "it (written before signing was turned on, or rewritten whole)"
            )
        if self.valid:
            return "valid"
        where = f" (line {self.line})" if self.line is not None else ""
        return f"INVALID: {self.reason}{where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "valid": self.valid,
            "reason": self.reason,
            "line": self.line,
            "records": self.records,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "checkpoints": self.checkpoints,
            "warnings": list(self.warnings),
            "unsigned": self.unsigned,
        }


def verify_files(
    paths: Sequence[str],
    *,
    public_keys: Sequence[Ed25519PublicKey] = (),
    checkpoint_files: Sequence[str] = (),
) -> list[FileReport]:
    """One report per log file (in the order given: one chain's files, oldest first), then one
    per checkpoint file. With `public_keys`, checkpoint signatures must verify with one of
    them and at least one signed checkpoint must cover the log."""
    keys = list(public_keys)
    checkpoint_states: list[_FileState] = []
    external: dict[tuple[str, int], list[_ExternalCheckpoint]] = {}
    for path in checkpoint_files:
        state, found = _load_checkpoint_file(path, keys)
        checkpoint_states.append(state)
        for checkpoint in found:
            external.setdefault((checkpoint.origin, checkpoint.seq), []).append(checkpoint)
    walker = _ChainWalker(keys, external)
    for path in paths:
        walker.verify_file(path)
    walker.finish()
    return [state.freeze() for state in walker.states] + [
        state.freeze() for state in checkpoint_states
    ]


# -- internals ------------------------------------------------------------------------------

_UNKNOWN = "unknown"  # the previous checkpoint hash when verification starts mid-run


@dataclass(slots=True)
class _FileState:
    path: str
    kind: str = "log"
    reason: str | None = None
    line: int | None = None
    records: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    last_line: int = 0
    checkpoints: int = 0
    warnings: list[str] = field(default_factory=list)
    unsigned: bool = False

    def fail(self, line: int | None, reason: str) -> None:
        if self.reason is None:
            self.reason, self.line = reason, line

    @property
    def failed(self) -> bool:
        return self.reason is not None

    def freeze(self) -> FileReport:
        return FileReport(
            path=self.path,
            valid=self.reason is None,
            reason=self.reason,
            line=self.line,
            records=self.records,
            first_seq=self.first_seq,
            last_seq=self.last_seq,
            checkpoints=self.checkpoints,
            warnings=tuple(self.warnings),
            kind=self.kind,
            unsigned=self.unsigned,
        )


@dataclass(frozen=True, slots=True)
class _Accepted:
    sha256: str
    seq: int
    state: _FileState
    line: int


@dataclass(frozen=True, slots=True)
class _Pending:
    """A line that is not a chained record: torn (if a later restart names it) or tampering."""

    state: _FileState
    line: int
    sha256: str
    problem: str


@dataclass(frozen=True, slots=True)
class _ExternalCheckpoint:
    origin: str
    seq: int
    head: str
    source: str
    signed: bool


class _ChainWalker:
    def __init__(
        self,
        keys: list[Ed25519PublicKey],
        external: dict[tuple[str, int], list[_ExternalCheckpoint]],
    ) -> None:
        self.keys = keys
        self.external = external
        self.states: list[_FileState] = []
        self.head: _Accepted | None = None
        self.recent: deque[_Accepted] = deque(maxlen=8)
        self.pending: list[_Pending] = []
        self.lenient_start = False  # after a failure: take the next record as a fresh start
        self.origin: str | None = None
        self.first_seq: int | None = None
        self.last_checkpoint_hash: str | None = _UNKNOWN
        self.checkpoints_seen = 0
        self.anchored_seq: int | None = None  # highest seq a signed checkpoint covers
        self.anchor_line_seq: int | None = None  # seq of the checkpoint line itself

    # -- per file ---------------------------------------------------------------------------

    def verify_file(self, path: str) -> None:
        state = _FileState(path)
        self.states.append(state)
        if len(self.states) > 1 and self.states[-2].failed:
            self._resync(state, "not linked to the previous file, which is INVALID")
        try:
            with open(path, "rb") as handle:
                lines = iter_lines(handle)
                line = next(lines, None)
                while line is not None:
                    upcoming = next(lines, None)
                    state.last_line = line.number
                    if upcoming is not None and _names_as_torn(upcoming, line):
                        # Checked before the line itself: a torn line may even parse.
                        state.warnings.append(
                            f"line {line.number}: torn write, named by the restart at line "
                            f"{upcoming.number}; not part of the chain"
                        )
                    elif not self._line(state, line):
                        self._resync(None, None)
                        break
                    line = upcoming
        except OSError as exc:
            state.fail(None, f"cannot read the file: {exc.strerror or exc}")
            self._resync(None, None)
            return
        if state.records == 0 and not state.failed and not self.pending:
            state.warnings.append("no records in this file")

    def _resync(self, state: _FileState | None, note: str | None) -> None:
        self.head = None
        self.recent.clear()
        self.pending.clear()
        self.lenient_start = True
        self.last_checkpoint_hash = _UNKNOWN
        if state is not None and note is not None:
            state.warnings.append(note)

    def _line(self, state: _FileState, line: RawLine) -> bool:
        """Check one line; False stops this file (its first failure is recorded)."""
        n = line.number
        if not line.terminated:
            state.warnings.append(
                f"line {n}: torn write (the last line has no newline: a write was cut short); "
                "not part of the chain"
            )
            return True
        record: Any = None
        problem = "longer than the record limit"
        if line.data is not None:
            try:
                record = orjson.loads(line.data)
                problem = "not a chained audit record"
            except orjson.JSONDecodeError:
                problem = "not valid JSON"
        link = chain_link(record)
        if link is None:
            self.pending.append(_Pending(state, n, line.sha256, problem))
            return True

        action = record_action(record)
        torn_named = _torn_hashes(record) if action == AuditAction.LOG_START else frozenset()
        if self.pending and not self._settle_pending(state, n, torn_named):
            return False
        if not self._link(state, n, line, link, action, torn_named):
            return False
        return self._accept(state, n, line, link, action, record)

    def _settle_pending(self, state: _FileState, n: int, torn_named: frozenset[str]) -> bool:
        unnamed = [p for p in self.pending if p.sha256 not in torn_named]
        if unnamed:
            first = unnamed[0]
            first.state.fail(
                first.line, f"line {first.line} is {first.problem} and no restart names it torn"
            )
            self.pending.clear()
            if first.state is state:
                return False
            self._resync(state, "not linked to the previous file, which is INVALID")
            return True
        for pending in self.pending:
            where = "" if pending.state is state else f" of {state.path}"
            pending.state.warnings.append(
                f"line {pending.line}: torn write, named by the restart at line {n}{where}; "
                "not part of the chain"
            )
        self.pending.clear()
        return True

    def _link(
        self,
        state: _FileState,
        n: int,
        line: RawLine,
        link: ChainLink,
        action: str | None,
        torn_named: frozenset[str],
    ) -> bool:
        head = self.head
        if head is None:
            return self._start(state, n, link, action)
        if link.prev is None:
            state.fail(
                n,
                f"line {n} starts a new chain (prev null) after seq {head.seq}: the files are "
                "out of order, from different chains, or the history before it was replaced",
            )
            return False
        if link.seq == head.seq + 1 and link.prev == head.sha256:
            return True
        if torn_named and self._step_back_over_torn(state, n, link, torn_named):
            return True
        if line.sha256 == head.sha256:
            state.fail(n, f"line {n} repeats line {_where(state, head.state, head.line)}")
            return False
        return self._locate_break(state, n, link, head)

    def _start(self, state: _FileState, n: int, link: ChainLink, action: str | None) -> bool:
        if link.prev is None:
            if action != AuditAction.LOG_START:
                state.fail(n, f"line {n} starts the chain but is not a log_start")
                return False
            self.last_checkpoint_hash = None
            return True
        if self.lenient_start:
            return True
        if action in (AuditAction.LOG_START, AuditAction.LOG_ROTATE):
            state.warnings.append(
                f"line {n}: continues a chain from a file not given (seq {link.seq}); "
                "earlier records were not checked"
            )
            return True
        state.fail(
            n,
            f"line {n} does not start a chain (it links to an earlier record but is neither "
            "log_start nor log_rotate): lines before it are missing",
        )
        return False

    def _step_back_over_torn(
        self, state: _FileState, n: int, link: ChainLink, torn_named: frozenset[str]
    ) -> bool:
        """A restart named lines as torn that happen to parse: drop them from the chain."""
        recent = list(self.recent)
        dropped: list[_Accepted] = []
        while recent and recent[-1].sha256 in torn_named:
            dropped.append(recent.pop())
        if not dropped or not recent:
            return False
        base = recent[-1]
        if link.seq != base.seq + 1 or link.prev != base.sha256:
            return False
        for entry in dropped:
            entry.state.records -= 1
            entry.state.warnings.append(
                f"line {entry.line}: torn write, named by the restart at line {n}; "
                "not part of the chain"
            )
        self.recent = deque(recent, maxlen=self.recent.maxlen)
        self.head = base
        return True

    def _locate_break(self, state: _FileState, n: int, link: ChainLink, head: _Accepted) -> bool:
        before = self.recent[-2] if len(self.recent) >= 2 else None
        culprit: tuple[int, str] | None = None
        if link.seq == head.seq + 1:
            culprit = (
                head.line,
                f"line {head.line} was altered: its hash no longer matches the prev recorded "
                f"by the next record ({_where(head.state, state, n)})",
            )
        elif before is not None and link.prev == before.sha256 and link.seq == before.seq + 1:
            culprit = (
                head.line,
                f"line {head.line} does not belong to the chain: the next record "
                f"({_where(head.state, state, n)}) links to the line before it (inserted)",
            )
        if culprit is not None:
            head.state.fail(*culprit)
            if head.state is state:
                return False
            # The bad line ended the previous file; this file can still be checked on its own.
            self._resync(state, "not linked to the previous file, which is INVALID")
            return True
        if link.seq > head.seq + 1:
            missing = link.seq - head.seq - 1
            state.fail(
                n,
                f"seq jumps from {head.seq} to {link.seq} at line {n}: {missing} record(s) "
                "before it were deleted or moved",
            )
        elif link.seq == head.seq + 1 or link.prev != head.sha256:
            state.fail(
                n,
                f"line {n} does not follow the record before it (seq {link.seq} after "
                f"{head.seq}, prev does not match): records reordered or replaced",
            )
        else:
            state.fail(n, f"line {n} repeats or reorders seq {link.seq} after {head.seq}")
        return False

    def _accept(
        self,
        state: _FileState,
        n: int,
        line: RawLine,
        link: ChainLink,
        action: str | None,
        record: dict[str, Any],
    ) -> bool:
        self.lenient_start = False
        entry = _Accepted(line.sha256, link.seq, state, n)
        self.head = entry
        self.recent.append(entry)
        state.records += 1
        if state.first_seq is None:
            state.first_seq = link.seq
        state.last_seq = link.seq
        if self.first_seq is None:
            self.first_seq = link.seq
        origin = _origin(record)
        if origin is not None:
            self.origin = origin
        if action == AuditAction.LOG_START:
            # Each process run starts its own run of checkpoints (prev_checkpoint null).
            self.last_checkpoint_hash = None
        elif action == AuditAction.CHECKPOINT and not self._checkpoint(state, n, link, record):
            return False
        for external in self.external.pop((self.origin or "", link.seq), []):
            if external.head != line.sha256:
                state.fail(
                    n,
                    f"line {n} (seq {link.seq}) does not match the checkpoint at "
                    f"{external.source}: the record was changed",
                )
                return False
            if external.signed and (self.anchored_seq is None or link.seq >= self.anchored_seq):
                self.anchored_seq = link.seq
                self.anchor_line_seq = link.seq
        return True

    def _checkpoint(
        self, state: _FileState, n: int, link: ChainLink, record: dict[str, Any]
    ) -> bool:
        payload_bytes, payload, problem = _read_checkpoint(record, self.keys)
        if problem is not None or payload is None or payload_bytes is None:
            state.fail(n, f"checkpoint at line {n}: {problem}")
            return False
        if payload.seq != link.seq - 1 or payload.head != link.prev:
            state.fail(
                n,
                f"checkpoint at line {n} vouches for seq {payload.seq}, which is not the "
                "record before it: records were changed",
            )
            return False
        shown = record.get("checkpoint")
        if isinstance(shown, Mapping) and (
            shown.get("seq", payload.seq) != payload.seq
            or shown.get("head", payload.head) != payload.head
        ):
            state.fail(n, f"checkpoint at line {n}: its fields differ from what it signs")
            return False
        if self.last_checkpoint_hash != _UNKNOWN and (
            payload.prev_checkpoint != self.last_checkpoint_hash
        ):
            state.fail(
                n,
                f"checkpoint at line {n} does not follow the previous checkpoint of this run "
                "(a checkpoint was removed or replaced)",
            )
            return False
        self.last_checkpoint_hash = hashlib.sha256(payload_bytes).hexdigest()
        state.checkpoints += 1
        self.checkpoints_seen += 1
        if self.keys:
            self.anchored_seq = payload.seq
            self.anchor_line_seq = link.seq
        return True

    # -- the whole chain --------------------------------------------------------------------

    def finish(self) -> None:
        if not self.states:
            return
        last = self.states[-1]
        for pending in self.pending:
            pending.state.fail(
                pending.line,
                f"line {pending.line} is {pending.problem} and no restart names it torn",
            )
            break
        self.pending.clear()
        last_seq = self.head.seq if self.head is not None else None
        if last_seq is not None and not last.failed:
            for (origin, seq), found in sorted(self.external.items()):
                if origin == self.origin and seq > last_seq:
                    last.fail(
                        last.last_line or None,
                        f"the log ends at seq {last_seq}, but the checkpoint at "
                        f"{found[0].source} covers seq {seq}: records it covers are missing",
                    )
                    break
        if any(state.failed for state in self.states):
            return
        if self.keys:
            if self.anchored_seq is None and self._never_signed():
                last.unsigned = True
                return
            if self.anchored_seq is None:
                last.fail(
                    None,
                    "no checkpoint signed by the given keys covers this log "
                    "(was it written with a signing key?)",
                )
                return
            assert self.anchor_line_seq is not None
            if last_seq is not None and last_seq > self.anchor_line_seq:
                last.warnings.append(
                    f"{last_seq - self.anchor_line_seq} record(s) after the last signed "
                    f"checkpoint (seq {self.anchored_seq}) are unverified: their removal or "
                    "change at the tail could not be detected"
                )
        elif self.checkpoints_seen:
            last.warnings.append(
                "checkpoint signatures were not checked (pass --key): records removed from "
                "the end of the log cannot be detected"
            )
        else:
            last.warnings.append(
                "no signed checkpoints: records removed from the end of the log cannot be detected"
            )


    def _never_signed(self) -> bool:
        """No checkpoint of this chain anywhere: in its files or in a checkpoints file (one
        that exists but fails to verify is INVALID, not unsigned)."""
        return self.checkpoints_seen == 0 and not any(
            origin == self.origin for origin, _ in self.external
        )


def _where(origin_state: _FileState, state: _FileState, n: int) -> str:
    return f"line {n}" if origin_state is state else f"{state.path} line {n}"


def _origin(record: dict[str, Any]) -> str | None:
    observer = record.get("observer")
    if isinstance(observer, Mapping):
        name = observer.get("name")
        if isinstance(name, str):
            return name
    return None


def _names_as_torn(restart: RawLine, line: RawLine) -> bool:
    """Whether `restart` is a log_start that names `line` as torn."""
    data = restart.data
    if data is None or line.sha256.encode() not in data or b'"torn"' not in data:
        return False
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return (
        isinstance(record, dict)
        and record_action(record) == AuditAction.LOG_START
        and line.sha256 in _torn_hashes(record)
    )


def _torn_hashes(record: dict[str, Any]) -> frozenset[str]:
    audit = record.get("audit")
    torn = audit.get("torn") if isinstance(audit, Mapping) else None
    if not isinstance(torn, list):
        return frozenset()
    return frozenset(
        entry["sha256"]
        for entry in torn
        if isinstance(entry, Mapping) and is_sha256_hex(entry.get("sha256"))
    )


def _read_checkpoint(
    record: Any, keys: list[Ed25519PublicKey]
) -> tuple[bytes | None, CheckpointPayload | None, str | None]:
    """(payload bytes, payload, problem): verified with `keys` when any are given."""
    checkpoint = record.get("checkpoint") if isinstance(record, Mapping) else None
    envelope = checkpoint.get("dsse") if isinstance(checkpoint, Mapping) else None
    if not isinstance(envelope, Mapping):
        return None, None, "no DSSE envelope"
    payload_bytes: bytes | None
    if keys:
        try:
            payload_bytes = verify_dsse(envelope, keys, CHECKPOINT_PAYLOAD_TYPE)
        except DSSEError as exc:
            return None, None, f"signature does not verify: {exc}"
    else:
        payload_bytes = _unverified_payload(envelope)
        if payload_bytes is None:
            return None, None, "malformed DSSE envelope"
    try:
        return payload_bytes, CheckpointPayload.from_bytes(payload_bytes), None
    except ValueError as exc:
        return None, None, str(exc)


def _unverified_payload(envelope: Mapping[str, Any]) -> bytes | None:
    if envelope.get("payloadType") != CHECKPOINT_PAYLOAD_TYPE:
        return None
    payload = envelope.get("payload")
    if not isinstance(payload, str):
        return None
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None


def _load_checkpoint_file(
    path: str, keys: list[Ed25519PublicKey]
) -> tuple[_FileState, list[_ExternalCheckpoint]]:
    """A checkpoints file (the log's checkpoint lines, copied): each one checked on its own
    and against the previous checkpoint of the same origin."""
    state = _FileState(path, kind="checkpoints")
    found: list[_ExternalCheckpoint] = []
    previous: dict[str, str] = {}
    try:
        with open(path, "rb") as handle:
            for line in iter_lines(handle):
                n = line.number
                state.last_line = n
                if not line.terminated:
                    state.warnings.append(f"line {n}: torn write at the end; ignored")
                    break
                try:
                    record = orjson.loads(line.data) if line.data is not None else None
                except orjson.JSONDecodeError:
                    record = None
                if not isinstance(record, dict) or record_action(record) != AuditAction.CHECKPOINT:
                    state.fail(n, f"line {n} is not a checkpoint record")
                    break
                payload_bytes, payload, problem = _read_checkpoint(record, keys)
                if problem is not None or payload is None or payload_bytes is None:
                    state.fail(n, f"checkpoint at line {n}: {problem}")
                    break
                before = previous.get(payload.origin)
                if (
                    payload.prev_checkpoint is not None
                    and before is not None
                    and payload.prev_checkpoint != before
                ):
                    state.fail(
                        n,
                        f"checkpoint at line {n} does not follow the previous checkpoint of "
                        f"{payload.origin!r} (a checkpoint was removed or replaced)",
                    )
                    break
                previous[payload.origin] = hashlib.sha256(payload_bytes).hexdigest()
                state.checkpoints += 1
                found.append(
                    _ExternalCheckpoint(
                        payload.origin, payload.seq, payload.head, f"{path} line {n}", bool(keys)
                    )
                )
    except OSError as exc:
        state.fail(None, f"cannot read the file: {exc.strerror or exc}")
    if not keys and state.checkpoints:
        state.warnings.append("signatures were not checked (pass --key)")
    return state, found
