"""Live reload: SIGHUP, or a change to the configuration or a policy file it
names, re-reads policies, clients, tokens and limits.

Only those apply live; any other changed key is logged and shown in /v1/status as needing a
restart, and the running value is kept. A file that fails validation keeps the running state
(`Services.reload_failed` records it, with every problem, in the audit log and in /v1/status).
Reading, parsing and compiling run in a worker thread; only the swap runs on the event loop.
Files are polled every second by (mtime, size, inode); a changed signature is confirmed by
SHA-256, so touching a file does not reload it. Each file is fingerprinted before it is read,
so an edit landing during a reload is seen by the next poll, never mistaken for loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import signal
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config import GatewayConfig
from gateway.configload import restart_needed, watched_files
from gateway.policy.load import PolicyValidationError
from gateway.runtime import PolicyState, Services, load_policy_state

log = logging.getLogger("gateway.reload")

POLL_INTERVAL = 1.0
MAX_HASHED_BYTES = 16 * 1024 * 1024
# A file modified this close to its fingerprint may change again without its (mtime, size,
# inode) changing (coarse file system clocks): it is hashed again until it is older.
RACY_NS = 2_000_000_000
# What loading a policy state raises for a bad file; anything else is a bug and propagates.
STATE_ERRORS = (PolicyValidationError, OSError, ValueError)

Signature = tuple[int, int, int] | None
StateLoader = Callable[[GatewayConfig], PolicyState]


@dataclass(frozen=True, slots=True)
class Fingerprint:
    signature: Signature
    digest: str | None
    taken_ns: int  # wall clock, as mtimes are

    @property
    def racy(self) -> bool:
        return self.signature is not None and self.signature[0] >= self.taken_ns - RACY_NS


@dataclass(frozen=True, slots=True)
class _Prepared:
    """What the worker thread read: the fingerprints taken before reading, then either the new
    state (and the configuration it came from) or the problem that keeps the running one."""

    seen: dict[str, Fingerprint]
    config: GatewayConfig | None = None
    state: PolicyState | None = None
    restart_needed: tuple[str, ...] = ()
    config_problem: str | None = None
    state_problem: str | None = None


class ReloadController:
    def __init__(
        self,
        services: Services,
        load_config: Callable[[], GatewayConfig] | None = None,
        *,
        interval: float = POLL_INTERVAL,
        load_state: StateLoader = load_policy_state,
        seen: dict[str, Fingerprint] | None = None,
    ) -> None:
        """`seen`: fingerprints taken before the running state was read (serve takes them
        before building the services); without it the files are fingerprinted now."""
        self._services = services
        self._load_config = load_config
        self._load_state = load_state
        self._interval = interval
        self.restart_needed: tuple[str, ...] = ()
        self.reloads = 0
        # The configuration file as last read, when its policies failed to load: the policy
        # files it names are watched too, so fixing one reloads like any other edit.
        self._unapplied: GatewayConfig | None = None
        self._seen: dict[str, Fingerprint] = (
            dict(seen) if seen is not None else fingerprint_files(self.watched())
        )
        # One reload at a time, and never while the watcher compares fingerprints.
        self._lock = asyncio.Lock()
        self._pending: set[asyncio.Future[bool]] = set()

    async def reload(self, why: str) -> bool:
        """Reload now (after any reload in progress); True when the new state is in force."""
        async with self._lock:
            return await self._reload(why)

    def reload_soon(self, why: str) -> None:
        """Start a reload without waiting for it (the SIGHUP handler)."""
        task = asyncio.ensure_future(self.reload(why))
        self._pending.add(task)
        task.add_done_callback(self._finished)

    async def close(self) -> None:
        """Wait for the reloads SIGHUP started (each finishes its thread's reading and its
        record; none is left running when the services close)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def _finished(self, task: asyncio.Future[bool]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("reload failed unexpectedly", exc_info=task.exception())

    async def _reload(self, why: str) -> bool:
        prepared = await asyncio.to_thread(self._prepare)
        return self._apply(prepared, why)

    def _prepare(self) -> _Prepared:
        """Off the event loop: fingerprint, then read and compile. Touches no running state."""
        services = self._services
        seen = fingerprint_files(self.watched())  # before reading: a later edit differs
        config = None
        restart: tuple[str, ...] = ()
        if self._load_config is not None:
            try:
                fresh = self._load_config()
            except Exception as exc:  # any failure to read keeps the running state
                return _Prepared(seen, config_problem=str(exc) or type(exc).__name__)
            restart = restart_needed(services.config, fresh)
            config = dataclasses.replace(
                services.config, policy=fresh.policy, clients=fresh.clients
            )
            # Policy files the new configuration names for the first time, before reading them.
            seen.update(fingerprint_files(p for p in watched_files(config) if p not in seen))
        try:
            state = self._load_state(config or services.config)
        except STATE_ERRORS as exc:
            problem = str(exc) or type(exc).__name__
            return _Prepared(seen, config, restart_needed=restart, state_problem=problem)
        return _Prepared(seen, config, state, restart)

    def _apply(self, prepared: _Prepared, why: str) -> bool:
        """On the event loop: swap the new state in, or record why not."""
        services = self._services
        # The failed bytes are not retried every second; an edit after the fingerprint is.
        self._seen = prepared.seen
        if prepared.config_problem is not None:
            services.reload_failed(prepared.config_problem)
            log.error(
                "reload failed: configuration kept",
                extra={"trigger": why, "problems": prepared.config_problem.splitlines()[:50]},
            )
            return False
        self.restart_needed = prepared.restart_needed
        self._unapplied = prepared.config if prepared.state is None else None
        if self.restart_needed:
            log.warning(
                "configuration changes that need a restart were not applied",
                extra={"keys": list(self.restart_needed)},
            )
        self.reloads += 1
        if prepared.state is None:
            services.reload_failed(prepared.state_problem or "reload failed")
            ok = False
        else:
            ok = services.adopt_state(prepared.state, prepared.config)
        if ok:
            log.info("reloaded", extra={"trigger": why, "clients": len(services.state.clients)})
        else:
            log.error(
                "reload failed: previous policies kept",
                extra={"trigger": why, "problems": list(services.reload_status.problems)[:50]},
            )
        return ok

    def install_sighup(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, self.reload_soon, "SIGHUP")

    # --- watching -----------------------------------------------------------------------

    def watched(self) -> tuple[str, ...]:
        running = watched_files(self._services.config)
        if self._unapplied is None:
            return running
        return tuple(dict.fromkeys((*running, *watched_files(self._unapplied))))

    def changed(self) -> list[str]:
        """The watched files whose content differs from what was last loaded (blocking I/O:
        the watcher runs it in a thread)."""
        out = []
        for path in self.watched():
            before = self._seen.get(path)
            signature = _signature(path)
            if before is not None and before.signature == signature and not before.racy:
                continue
            now = _fingerprint(path, signature)
            if before is None or now.digest != before.digest:
                out.append(path)
            else:
                self._seen[path] = now  # touched, same bytes
        return out

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                async with self._lock:
                    changed = await asyncio.to_thread(self.changed)
                    if changed:
                        names = ", ".join(os.path.basename(p) for p in changed)
                        await self._reload("file change: " + names)
            except Exception:
                log.exception("file watch failed")

    async def status(self) -> dict[str, Any]:
        return {
            "watched": [os.path.basename(p) for p in self.watched()],
            "restart_needed": list(self.restart_needed),
        }


def fingerprint_files(paths: Iterable[str]) -> dict[str, Fingerprint]:
    """Fingerprints to compare later polls with; take them before reading the files."""
    return {path: _fingerprint(path, None) for path in paths}


def startup_fingerprints(
    config: GatewayConfig, config_seen: Mapping[str, Fingerprint] | None = None
) -> dict[str, Fingerprint]:
    """What a starting server compares later polls with: every watched file as it is now,
    before the services read the policies, and the configuration file as it was before it
    was read, when known (`config_seen`): an edit made while either was read is a change."""
    return {**fingerprint_files(watched_files(config)), **(config_seen or {})}


def fingerprint_config_source(path: str | None) -> dict[str, Fingerprint]:
    """The configuration file's fingerprint, taken before `load_config_file` reads it and
    keyed as the loaded configuration's `source` (its absolute path); {} without a file."""
    return fingerprint_files([os.path.abspath(path)]) if path else {}


def _signature(path: str) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _fingerprint(path: str, signature: Signature) -> Fingerprint:
    taken = time.time_ns()
    signature = signature if signature is not None else _signature(path)
    digest = None
    try:
        # Non-blocking, regular files only: a FIFO in a watched path must not hang the watcher.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(descriptor, "rb") as handle:
            if stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                digest = hashlib.sha256(handle.read(MAX_HASHED_BYTES)).hexdigest()
    except OSError:
        pass
    return Fingerprint(signature, digest, taken)
