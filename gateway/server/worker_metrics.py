"""/metrics with several workers: each worker's series, whichever worker is scraped.

Every worker writes its own exposition to a directory the supervisor made for this run (once a
second, atomically) and holds an exclusive `flock` on its lock file while it lives. A scrape
answers the scraped worker's live values plus the snapshot of every other worker whose lock
is still held (the kernel drops a dead worker's lock, so its series vanish with it), each
sample labelled `worker="<n>"`. Owns no metric values and never decides anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("gateway.worker_metrics")

SNAPSHOT_INTERVAL = 1.0
SNAPSHOT_SUFFIX = ".prom"
LOCK_SUFFIX = ".lock"
LABEL = "worker"
# Snapshots are the gateway's own files, but one is never trusted to be small.
MAX_SNAPSHOT_BYTES = 8 * 1024 * 1024
LOCK_ATTEMPTS = 20
LOCK_RETRY_S = 0.005
_WORKER_NAME = re.compile(r"[0-9]{1,6}")


class WorkerMetrics:
    """One worker's side of the shared metrics directory."""

    def __init__(self, directory: str, worker: str) -> None:
        if not _WORKER_NAME.fullmatch(worker):
            raise ValueError(f"worker name must be its index, got {worker!r}")
        self.directory = directory
        self.worker = worker
        self._lock_fd: int | None = None

    def _path(self, worker: str, suffix: str) -> str:
        return os.path.join(self.directory, worker + suffix)

    def open(self) -> None:
        """Take this worker's liveness lock (a restarted worker takes over its slot's)."""
        fd = os.open(self._path(self.worker, LOCK_SUFFIX), os.O_RDWR | os.O_CREAT, 0o600)
        # A dead predecessor's lock is gone with it; a live holder is a misconfiguration.
        # Another worker's scrape may be probing this slot (`_alive`: a shared lock held
        # for microseconds), so a held lock is tried again for a short while.
        for attempt in range(LOCK_ATTEMPTS):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if attempt + 1 == LOCK_ATTEMPTS:
                    os.close(fd)
                    raise
                time.sleep(LOCK_RETRY_S)
            except OSError:
                os.close(fd)
                raise
        self._lock_fd = fd

    def close(self) -> None:
        """Withdraw this worker's series; the last worker out removes the directory."""
        if self._lock_fd is None:
            return  # never opened: the files, if any, are another worker's
        for suffix in (SNAPSHOT_SUFFIX, LOCK_SUFFIX):
            with contextlib.suppress(OSError):
                os.unlink(self._path(self.worker, suffix))
        os.close(self._lock_fd)
        self._lock_fd = None
        with contextlib.suppress(OSError):
            os.rmdir(self.directory)

    def write(self, exposition: bytes) -> None:
        """Replace this worker's snapshot atomically: a reader sees the old or the new one."""
        final = self._path(self.worker, SNAPSHOT_SUFFIX)
        partial = final + ".tmp"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "wb") as handle:
            handle.write(exposition)
        os.replace(partial, final)

    def live_snapshots(self) -> dict[str, bytes]:
        """The other live workers' last snapshots, by worker."""
        out: dict[str, bytes] = {}
        try:
            names = os.listdir(self.directory)
        except OSError:
            return out
        for name in names:
            worker, suffix = os.path.splitext(name)
            if suffix != SNAPSHOT_SUFFIX or worker == self.worker:
                continue
            if not _WORKER_NAME.fullmatch(worker) or not self._alive(worker):
                continue
            try:
                with open(os.path.join(self.directory, name), "rb") as handle:
                    data = handle.read(MAX_SNAPSHOT_BYTES + 1)
            except OSError:
                continue
            if len(data) <= MAX_SNAPSHOT_BYTES:
                out[worker] = data
        return out

    def _alive(self, worker: str) -> bool:
        try:
            fd = os.open(self._path(worker, LOCK_SUFFIX), os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # its owner holds it: the worker lives
        except OSError:
            return False
        finally:
            os.close(fd)  # also releases the shared lock when it was granted
        return False

    def merge(self, own: bytes) -> bytes:
        """This worker's exposition and the other live workers', one family block each."""
        return merge_expositions({self.worker: own, **self.live_snapshots()})

    async def run(self, render: Callable[[], Awaitable[bytes]], interval: float) -> None:
        """Write a snapshot every `interval` seconds until cancelled."""
        while True:
            try:
                self.write(await render())
            except Exception:  # a full disk costs the other workers' view, never a request
                log.exception("writing the worker's metrics snapshot failed")
            await asyncio.sleep(interval)


def merge_expositions(by_worker: dict[str, bytes]) -> bytes:
    """Prometheus text expositions (as `generate_latest` writes them: `# HELP`, `# TYPE`, then
    the samples of each family) merged into one, every sample labelled with its worker."""
    families: dict[str, tuple[list[str], list[str]]] = {}
    for worker in sorted(by_worker, key=int):
        current: tuple[list[str], list[str]] | None = None
        for line in by_worker[worker].decode("utf-8", "replace").splitlines():
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    current = families.get(parts[2])
                    if current is None:
                        current = families[parts[2]] = ([], [])
                    if len(current[0]) < 2 and line not in current[0]:
                        current[0].append(line)
                continue
            if current is not None:
                current[1].append(with_worker_label(line, worker))
    out = []
    for header, samples in families.values():
        out.extend(header)
        out.extend(samples)
    return ("\n".join(out) + "\n").encode() if out else b""


def with_worker_label(sample: str, worker: str) -> str:
    """`name{a="b"} 1` -> `name{worker="0",a="b"} 1`; `name 1` -> `name{worker="0"} 1`."""
    brace, space = sample.find("{"), sample.find(" ")
    label = f'{LABEL}="{worker}"'
    if brace != -1 and (space == -1 or brace < space):
        rest = sample[brace + 1 :]
        return f"{sample[: brace + 1]}{label}{'' if rest.startswith('}') else ','}{rest}"
    if space == -1:
        return sample
    return f"{sample[:space]}{{{label}}}{sample[space:]}"
