"""Per-client summaries and decisions over time, for the whole audit folder: counts by decision
and by refusal reason, the top domains allowed and refused, decision counts per minute (per
hour once the log spans too many minutes), the policy reloads, and injection signals per
domain. Decisions are counted apart from the records that are none (malformed requests,
authentication challenges and failures, tunnel closes), as `audit summary` counts them.

Each file is read once: its tally is kept with the offset it reached and only the lines
written since are read on the next view (a rotated file keeps its tally: rotation renames).
Memory is bounded by the caps on distinct domains and time buckets, not by the log's size.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.audit.chain import MAX_LINE_BYTES
from gateway.audit.fields import (
    Disposition,
    action_of,
    client_of,
    disposition_of,
    domain_of,
    int_field,
    is_lifecycle,
    parse_timestamp,
    section,
    text_field,
)
from gateway.audit.summary import RecordKind, failures_in, kind_of
from gateway.review.files import AuditFolder, LogFile
from gateway.review.query import RELOAD_ACTION

MAX_DOMAINS = 5_000  # distinct domains counted per client and kind; the rest add to "other"
MAX_BUCKETS = 20_000  # per-minute buckets kept before they are merged into hours
MAX_RELOADS = 500  # the newest reloads kept
OTHER = "(other domains)"
_READ_CHUNK = 4 * 1024 * 1024


@dataclass(slots=True)
class ClientTally:
    decisions: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    allowed: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    malformed: int = 0  # requests refused for their form, before any rule

    def merge(self, other: ClientTally) -> None:
        self.decisions.update(other.decisions)
        self.reasons.update(other.reasons)
        self.malformed += other.malformed
        _merge_capped(self.allowed, other.allowed)
        _merge_capped(self.refused, other.refused)


@dataclass(slots=True)
class Signals:
    """What `provenance.sanitize` neutralised in one domain's content."""

    records: int = 0
    marker_lookalikes: int = 0
    invisible_chars: int = 0

    def merge(self, other: Signals) -> None:
        self.records += other.records
        self.marker_lookalikes += other.marker_lookalikes
        self.invisible_chars += other.invisible_chars


@dataclass(frozen=True, slots=True)
class Reload:
    timestamp: float
    outcome: str
    policy: str
    sha256: str


@dataclass(slots=True)
class Tally:
    """What a set of lines adds up to."""

    clients: dict[str, ClientTally] = field(default_factory=dict)
    bucket_seconds: int = 60
    buckets: dict[int, Counter[str]] = field(default_factory=dict)
    reloads: list[Reload] = field(default_factory=list)
    records: int = 0
    decisions: int = 0
    kinds: Counter[str] = field(default_factory=Counter)  # every record's RecordKind
    signals: dict[str, Signals] = field(default_factory=dict)
    _seconds: dict[str, float] = field(default_factory=dict)  # "YYYY-MM-DDTHH:MM:SS" -> time

    def add(self, record: Mapping[str, Any]) -> None:
        seen = self._seen(record)
        if action_of(record) == RELOAD_ACTION:
            if seen is not None:
                policy = section(record, "policy")
                self.reloads.append(
                    Reload(
                        seen,
                        text_field(section(record, "event"), "outcome") or "-",
                        text_field(policy, "name") or "-",
                        text_field(policy, "sha256") or "-",
                    )
                )
                del self.reloads[:-MAX_RELOADS]
            return
        if is_lifecycle(record):
            return
        self.records += 1
        kind = kind_of(record)
        self.kinds[kind] += failures_in(record) if kind is RecordKind.AUTH_FAILURE else 1
        if kind in (RecordKind.AUTH_CHALLENGE, RecordKind.AUTH_FAILURE, RecordKind.TUNNEL_CLOSE):
            return  # no client's request decided: counted apart
        client = client_of(record) or "-"
        tally = self.clients.get(client)
        if tally is None:
            tally = self.clients[client] = ClientTally()
        if kind == RecordKind.MALFORMED:
            tally.malformed += 1
            return
        self.decisions += 1
        decision = disposition_of(record)
        tally.decisions[decision] += 1
        domain = domain_of(record)
        self._signals(record, domain or "-")
        if decision in (Disposition.DENY, Disposition.WOULD_DENY):
            tally.reasons[text_field(section(record, "policy"), "reason") or "unspecified"] += 1
            if domain:  # a search names no domain
                _count_capped(tally.refused, domain)
        elif decision == Disposition.ALLOW and domain:
            _count_capped(tally.allowed, domain)
        if seen is not None:
            self._bucket(int(seen))[decision] += 1

    def _signals(self, record: Mapping[str, Any], domain: str) -> None:
        sanitized = section(record, "sanitized")
        lookalikes = int_field(sanitized, "marker_lookalikes")
        invisible = int_field(sanitized, "invisible_chars")
        if not (lookalikes or invisible):
            return
        if domain not in self.signals and len(self.signals) >= MAX_DOMAINS:
            domain = OTHER
        found = self.signals.setdefault(domain, Signals())
        found.merge(Signals(1, lookalikes, invisible))

    def _seen(self, record: Mapping[str, Any]) -> float | None:
        """The record's time, parsed once per distinct second (records come in bursts)."""
        stamp = record.get("@timestamp")
        if not isinstance(stamp, str):
            return None
        second = stamp[:19]
        cached = self._seconds.get(second)
        if cached is None:
            moment = parse_timestamp(stamp)
            if moment is None:
                return None
            if len(self._seconds) > 4096:
                self._seconds.clear()
            cached = self._seconds[second] = float(int(moment))
        return cached

    def _bucket(self, second: int) -> Counter[str]:
        start = second - second % self.bucket_seconds
        bucket = self.buckets.get(start)
        if bucket is None:
            if len(self.buckets) >= MAX_BUCKETS and self.bucket_seconds < 3600:
                self._coarsen(3600)
                return self._bucket(second)
            bucket = self.buckets[start] = Counter()
        return bucket

    def _coarsen(self, seconds: int) -> None:
        merged: dict[int, Counter[str]] = {}
        for start, counts in self.buckets.items():
            merged.setdefault(start - start % seconds, Counter()).update(counts)
        self.buckets, self.bucket_seconds = merged, seconds

    def merge(self, other: Tally) -> None:
        for client, tally in other.clients.items():
            self.clients.setdefault(client, ClientTally()).merge(tally)
        if other.bucket_seconds > self.bucket_seconds:
            self._coarsen(other.bucket_seconds)
        buckets = other.buckets
        if other.bucket_seconds < self.bucket_seconds:
            copy = Tally(buckets=dict(other.buckets), bucket_seconds=other.bucket_seconds)
            copy._coarsen(self.bucket_seconds)
            buckets = copy.buckets
        for start, counts in buckets.items():
            self.buckets.setdefault(start, Counter()).update(counts)
        if len(self.buckets) > MAX_BUCKETS and self.bucket_seconds < 3600:
            self._coarsen(3600)
        self.reloads = sorted(self.reloads + other.reloads, key=lambda r: r.timestamp)[
            -MAX_RELOADS:
        ]
        self.records += other.records
        self.decisions += other.decisions
        self.kinds.update(other.kinds)
        for domain, found in other.signals.items():
            if domain not in self.signals and len(self.signals) >= MAX_DOMAINS:
                domain = OTHER
            self.signals.setdefault(domain, Signals()).merge(found)


def _count_capped(counter: Counter[str], key: str) -> None:
    if key in counter or len(counter) < MAX_DOMAINS:
        counter[key] += 1
    else:
        counter[OTHER] += 1


def _merge_capped(into: Counter[str], other: Counter[str]) -> None:
    for key, count in other.items():
        if key in into or len(into) < MAX_DOMAINS:
            into[key] += count
        else:
            into[OTHER] += count


@dataclass(slots=True)
class _FileProgress:
    consumed: int  # offset after the last complete line read
    tally: Tally


class Overview:
    """Tallies of the folder's files, kept between views and brought up to date on each."""

    def __init__(self, folder: AuditFolder) -> None:
        self.folder = folder
        self._progress: dict[tuple[int, int], _FileProgress] = {}
        self._lock = threading.Lock()

    def tally(self) -> Tally:
        with self._lock:
            files = [file for chain in self.folder.chains() for file in chain.files]
            total = Tally()
            alive = set()
            for file in files:
                alive.add(file.identity)
                total.merge(self._file_tally(file))
            for gone in set(self._progress) - alive:
                del self._progress[gone]
            return total

    def _file_tally(self, file: LogFile) -> Tally:
        progress = self._progress.get(file.identity)
        if progress is None or file.size < progress.consumed:  # new, or truncated
            progress = self._progress[file.identity] = _FileProgress(0, Tally())
        if file.size > progress.consumed:
            # Rotated or removed meanwhile: the rest is counted under its new name next time.
            with contextlib.suppress(OSError):
                _read_from(file, progress)
        return progress.tally


def _read_from(file: LogFile, progress: _FileProgress) -> None:
    """Add the complete lines after `progress.consumed`, moving it past each chunk's lines."""
    with open(file.path, "rb") as handle:
        handle.seek(progress.consumed)
        carry = b""
        while True:
            chunk = handle.read(_READ_CHUNK)
            if not chunk:
                return
            data = carry + chunk
            last = data.rfind(b"\n")
            if last == -1:
                carry = data if len(data) <= MAX_LINE_BYTES else b""
                if not carry:  # inside an over-long line: never a record
                    progress.consumed += len(data)
                continue
            _add_lines(progress.tally, data[:last].split(b"\n"))
            progress.consumed += last + 1
            carry = data[last + 1 :]


def _add_lines(tally: Tally, lines: Iterable[bytes]) -> None:
    for line in lines:
        if len(line) > MAX_LINE_BYTES:
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict):
            tally.add(record)
