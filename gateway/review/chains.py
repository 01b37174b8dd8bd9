"""Each chain's state for the review page: `audit verify` on the chain's files in order (every
file valid or the first bad line and why), its checkpoints and whether their signatures were
checked, with the gateway's own public keys. A chain is verified again only once its files
changed (new records, a rotation).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gateway.audit.verify import FileReport, verify_files
from gateway.review.files import INSTANCE_PLACEHOLDER, AuditFolder, Chain


@dataclass(frozen=True, slots=True)
class ChainState:
    instance: str
    reports: tuple[FileReport, ...]  # one per log file (oldest first), then checkpoint files
    signatures_checked: bool

    @property
    def valid(self) -> bool:
        return all(report.valid and not report.unsigned for report in self.reports)

    @property
    def unsigned(self) -> bool:
        """Intact, but keys were given and no checkpoint vouches for it (from before signing)."""
        return all(r.valid for r in self.reports) and any(r.unsigned for r in self.reports)

    @property
    def checkpoints(self) -> int:
        return sum(report.checkpoints for report in self.reports if report.kind == "log")


class ChainChecker:
    """Verifies chains with the given keys, keeping the last result of each chain."""

    def __init__(
        self,
        folder: AuditFolder,
        *,
        public_keys: Sequence[Ed25519PublicKey] = (),
        checkpoints_template: str | None = None,
    ) -> None:
        self.folder = folder
        self.public_keys = tuple(public_keys)
        self.checkpoints_template = checkpoints_template
        self._cache: dict[str, tuple[tuple[object, ...], ChainState]] = {}
        self._lock = threading.Lock()

    def states(self) -> list[ChainState]:
        with self._lock:
            chains = self.folder.chains()
            results = [self._state(chain) for chain in chains]
            names = {chain.instance for chain in chains}
            for gone in set(self._cache) - names:
                del self._cache[gone]
            return results

    def _state(self, chain: Chain) -> ChainState:
        key = tuple((f.name, f.size, f.mtime_ns, f.identity) for f in chain.files)
        cached = self._cache.get(chain.instance)
        if cached is not None and cached[0] == key:
            return cached[1]
        checkpoint_files = []
        if self.checkpoints_template:
            path = self.checkpoints_template.replace(INSTANCE_PLACEHOLDER, chain.instance)
            if os.path.isfile(path):
                checkpoint_files.append(path)
        reports = verify_files(
            [file.path for file in chain.files],
            public_keys=self.public_keys,
            checkpoint_files=checkpoint_files,
        )
        names = {file.path: file.name for file in chain.files}
        names.update((path, os.path.basename(path)) for path in checkpoint_files)
        state = ChainState(
            chain.instance,
            tuple(_named(report, names) for report in reports),
            bool(self.public_keys),
        )
        self._cache[chain.instance] = (key, state)
        return state


def _named(report: FileReport, names: dict[str, str]) -> FileReport:
    """The report with the file's name rather than its full path."""
    return replace(report, path=names.get(report.path, report.path))
