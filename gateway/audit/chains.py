"""`audit verify` over a set of logs: files, folders and globs, grouped into their chains.

Each process writes its own chain (named by its instance id, `observer.name`), so a folder of
logs holds several chains, each in one or more files (rotation). Files are grouped by chain
and each chain's files are put in order (by their first `seq`) before the chain is walked, so
the order on the command line does not matter. A file whose first record opens a brand-new
chain (`log_start` with `prev: null`) starts a chain of its own. Files that hold only
checkpoint copies (`audit.checkpoints_path`) are recognised and checked as such.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway.audit.chain import AuditAction, chain_link, record_action
from gateway.audit.lines import iter_lines
from gateway.audit.verify import FileReport, verify_files

LOG_SUFFIX = ".jsonl"


@dataclass(frozen=True, slots=True)
class ChainReport:
    """One chain's result: its files (in chain order) and whether all of them verify."""

    name: str
    files: tuple[FileReport, ...]

    @property
    def valid(self) -> bool:
        return all(report.valid for report in self.files)

    @property
    def unsigned(self) -> bool:
        """Intact, but keys were given and no checkpoint at all vouches for it."""
        return self.valid and any(report.unsigned for report in self.files)

    @property
    def records(self) -> int:
        return sum(report.records for report in self.files)

    def describe(self) -> str:
        seqs = [r.first_seq for r in self.files if r.first_seq is not None]
        lasts = [r.last_seq for r in self.files if r.last_seq is not None]
        span = f", seq {min(seqs)}-{max(lasts)}" if seqs and lasts else ""
        count = len(self.files)
        verdict = "UNSIGNED" if self.unsigned else "valid" if self.valid else "INVALID"
        return f"{verdict} ({count} file{'s' if count != 1 else ''}, {self.records} records{span})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "chain",
            "chain": self.name,
            "valid": self.valid,
            "unsigned": self.unsigned,
            "files": [report.path for report in self.files],
            "records": self.records,
        }


@dataclass(slots=True)
class SetReport:
    """Every chain of the set, the checkpoint files, and paths that named no file."""

    chains: list[ChainReport] = field(default_factory=list)
    checkpoints: list[FileReport] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)

    @property
    def unsigned(self) -> int:
        """How many intact chains no checkpoint vouches for (keys given)."""
        return sum(1 for chain in self.chains if chain.unsigned)

    @property
    def valid(self) -> bool:
        return (
            bool(self.chains)
            and not self.unmatched
            and all(chain.valid for chain in self.chains)
            and all(report.valid for report in self.checkpoints)
        )

    def describe(self) -> str:
        chains = len(self.chains)
        invalid = sum(1 for chain in self.chains if not chain.valid) + sum(
            1 for report in self.checkpoints if not report.valid
        )
        files = sum(len(chain.files) for chain in self.chains)
        text = (
            f"{chains} chain{'s' if chains != 1 else ''}, {files} file{'s' if files != 1 else ''}"
        )
        if self.checkpoints:
            text += f", {len(self.checkpoints)} checkpoints file"
            text += "s" if len(self.checkpoints) != 1 else ""
        if self.unmatched:
            text += f", {len(self.unmatched)} path(s) matching no file"
        if not self.chains:
            return f"INVALID: no audit log files ({text})"
        if self.valid and self.unsigned:
            return f"valid but UNSIGNED ({text}; {self.unsigned} unsigned)"
        if self.valid:
            return f"valid ({text})"
        return f"INVALID ({text}; {invalid} invalid)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "set",
            "valid": self.valid,
            "unsigned": self.unsigned,
            "chains": len(self.chains),
            "files": sum(len(chain.files) for chain in self.chains),
            "unmatched": list(self.unmatched),
        }


def expand_paths(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """Files named directly, every `*.jsonl` in a named folder, and the matches of a glob
    (for a pattern the shell left alone); each file once. The second list holds the paths
    that named nothing (a glob with no match); a missing plain file is kept, so that
    verifying it reports that it cannot be read."""
    files: dict[str, str] = {}
    unmatched: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(glob.escape(path), "*" + LOG_SUFFIX)))
        elif os.path.lexists(path) or not glob.has_magic(path):
            found = [path]
        else:
            found = sorted(p for p in glob.glob(path) if not os.path.isdir(p))
        if not found:
            unmatched.append(path)
        for name in found:
            files.setdefault(os.path.realpath(name), name)
    return list(files.values()), unmatched


@dataclass(frozen=True, slots=True)
class _Head:
    """What a file's first record says about its place: chain, first seq, a fresh start."""

    path: str
    origin: str | None
    seq: int | None
    starts_chain: bool
    checkpoints_only: bool


def _head(path: str) -> _Head:
    record: Any = None
    try:
        with open(path, "rb") as handle:
            for line in iter_lines(handle):
                if line.data is not None and line.data.strip():
                    try:
                        record = orjson.loads(line.data)
                    except orjson.JSONDecodeError:
                        record = None
                    break
    except OSError:
        return _Head(path, None, None, False, False)
    if not isinstance(record, dict):
        return _Head(path, None, None, False, False)
    observer = record.get("observer")
    origin = observer.get("name") if isinstance(observer, dict) else None
    link = chain_link(record)
    action = record_action(record)
    return _Head(
        path,
        origin if isinstance(origin, str) else None,
        link.seq if link is not None else None,
        link is not None and link.prev is None and action == AuditAction.LOG_START,
        action == AuditAction.CHECKPOINT,
    )


def is_checkpoint_copy(path: str) -> bool:
    """Whether the file holds only checkpoint copies (`audit.checkpoints_path`), not a chain."""
    return _head(path).checkpoints_only


def group_chains(files: Sequence[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(chain name, its files in order) for each chain, and the checkpoint-copy files. A file
    whose chain cannot be read (unreadable, not a record) is a chain of its own, named by
    its path, so that verifying it says what is wrong."""
    by_origin: dict[str, list[_Head]] = {}
    checkpoint_files: list[str] = []
    for path in files:
        head = _head(path)
        if head.checkpoints_only:
            checkpoint_files.append(path)
            continue
        key = head.origin if head.origin is not None else f"\0{path}"
        by_origin.setdefault(key, []).append(head)
    chains: list[tuple[str, list[str]]] = []
    for key, heads in by_origin.items():
        heads.sort(key=lambda h: (h.seq if h.seq is not None else -1, h.path))
        name = key if not key.startswith("\0") else key[1:]
        runs: list[list[str]] = []
        for head in heads:
            if not runs or head.starts_chain:
                runs.append([])
            runs[-1].append(head.path)
        for i, run in enumerate(runs):
            chains.append((name if len(runs) == 1 else f"{name} #{i + 1}", run))
    chains.sort(key=lambda chain: chain[0])
    return chains, checkpoint_files


def log_files(paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """The log files under `paths` (files, folders, globs), each chain's in order, without
    checkpoint copies (what `audit summary` reads, so that no record is counted twice), and
    the paths that named nothing."""
    files, unmatched = expand_paths(paths)
    chains, _ = group_chains(files)
    return [path for _, chain_files in chains for path in chain_files], unmatched


def verify_paths(
    paths: Sequence[str],
    *,
    public_keys: Sequence[Ed25519PublicKey] = (),
    checkpoint_files: Sequence[str] = (),
) -> SetReport:
    """Verify every chain found under `paths`, each against the given checkpoint files and
    the checkpoint copies found among the paths."""
    files, unmatched = expand_paths(paths)
    chains, found_checkpoints = group_chains(files)
    checkpoints = list(dict.fromkeys([*checkpoint_files, *found_checkpoints]))
    report = SetReport(unmatched=unmatched)
    for name, chain_files in chains:
        reports = verify_files(chain_files, public_keys=public_keys, checkpoint_files=checkpoints)
        report.chains.append(ChainReport(name, tuple(reports[: len(chain_files)])))
    if checkpoints:
        report.checkpoints = verify_files([], public_keys=public_keys, checkpoint_files=checkpoints)
    return report
