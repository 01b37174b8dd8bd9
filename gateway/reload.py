"""Live reload (CONTRACT 4): SIGHUP, or a change to the configuration or a policy file it
names, re-reads policies, clients, tokens and limits.

Only those apply live; any other changed key is logged and shown in /v1/status as needing a
restart, and the running value is kept. A file that fails validation keeps the running state
(`Services.reload` / `reload_failed` record it, with every problem, in the audit log and in
/v1/status). Files are polled every second by (mtime, size, inode); a changed signature is
confirmed by SHA-256, so touching a file does not reload it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from gateway.config import GatewayConfig
from gateway.configload import restart_needed, watched_files
from gateway.runtime import Services

log = logging.getLogger("gateway.reload")

POLL_INTERVAL = 1.0
MAX_HASHED_BYTES = 16 * 1024 * 1024

Signature = tuple[int, int, int] | None


class ReloadController:
    def __init__(
        self,
        services: Services,
        load_config: Callable[[], GatewayConfig] | None = None,
        *,
        interval: float = POLL_INTERVAL,
    ) -> None:
        self._services = services
        self._load_config = load_config
        self._interval = interval
        self.restart_needed: tuple[str, ...] = ()
        self.reloads = 0
        self._seen: dict[str, tuple[Signature, str | None]] = {}
        self.remember()

    def reload(self, why: str) -> bool:
        """Reload now; True when the new state is in force."""
        services = self._services
        config = None
        if self._load_config is not None:
            try:
                fresh = self._load_config()
            except Exception as exc:  # any failure to read keeps the running state
                services.reload_failed(str(exc))
                log.error(
                    "reload failed: configuration kept",
                    extra={"trigger": why, "problems": str(exc).splitlines()[:50]},
                )
                self.remember()
                return False
            self.restart_needed = restart_needed(services.config, fresh)
            if self.restart_needed:
                log.warning(
                    "configuration changes that need a restart were not applied",
                    extra={"keys": list(self.restart_needed)},
                )
            config = dataclasses.replace(
                services.config, policy=fresh.policy, clients=fresh.clients
            )
        ok = services.reload(config)
        self.reloads += 1
        if ok:
            log.info("reloaded", extra={"trigger": why, "clients": len(services.state.clients)})
        else:
            log.error(
                "reload failed: previous policies kept",
                extra={"trigger": why, "problems": list(services.reload_status.problems)[:50]},
            )
        self.remember()
        return ok

    def install_sighup(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGHUP, self.reload, "SIGHUP")

    # --- watching -----------------------------------------------------------------------

    def watched(self) -> tuple[str, ...]:
        return watched_files(self._services.config)

    def remember(self) -> None:
        self._seen = {path: _fingerprint(path, None) for path in self.watched()}

    def changed(self) -> list[str]:
        """The watched files whose content differs from what was last loaded."""
        out = []
        for path in self.watched():
            before = self._seen.get(path)
            signature = _signature(path)
            if before is not None and before[0] == signature:
                continue
            now = _fingerprint(path, signature)
            if before is None or now[1] != before[1]:
                out.append(path)
            else:
                self._seen[path] = now  # touched, same bytes
        return out

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                changed = self.changed()
                if changed:
                    self.reload("file change: " + ", ".join(os.path.basename(p) for p in changed))
            except Exception:
                log.exception("file watch failed")

    async def status(self) -> dict[str, Any]:
        return {
            "watched": [os.path.basename(p) for p in self.watched()],
            "restart_needed": list(self.restart_needed),
        }


def _signature(path: str) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _fingerprint(path: str, signature: Signature) -> tuple[Signature, str | None]:
    signature = signature if signature is not None else _signature(path)
    try:
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read(MAX_HASHED_BYTES)).hexdigest()
    except OSError:
        digest = None
    return signature, digest
