"""Several workers behind one port (`listen.workers`): a parent that supervises, workers that serve.

The parent binds and serves nothing. Each worker is a fresh (spawned) process running
`serve()` on the same ports with SO_REUSEPORT, under its own instance id `<instance>-w<n>` and
so its own audit chain; limits, caches and search ids meet only in `state.redis`. The parent
forwards SIGTERM/SIGINT (drain) and SIGHUP (reload), restarts a worker that dies with a
backoff, and exits 0 once every worker drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from gateway.config import GatewayConfig
from gateway.runtime import default_instance_id

log = logging.getLogger("gateway.workers")

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
# A worker that lived this long before dying starts its slot's backoff afresh.
STABLE_AFTER = 30.0
# How long past `server.shutdown_grace` the parent waits for draining workers before it kills
# them: covers the cut-off allowance in serve.py and the final audit writes.
STOP_MARGIN = 20.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

ConfigBuilder = Callable[[], GatewayConfig]


def worker_instance_id(base: str, index: int) -> str:
    return f"{base}-w{index}"


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """What a worker needs to (re)build its configuration: sent to the spawned process, so
    `build` must be picklable (a module-level function or a partial of one)."""

    index: int
    base_instance: str
    build: ConfigBuilder
    # Where the workers share their metrics (server/worker_metrics.py); made by the supervisor.
    metrics_dir: str | None = None
    # The configuration file `build` reads, fingerprinted by the worker before each start.
    config_source: str | None = None

    def config(self) -> GatewayConfig:
        fresh = self.build()
        base = fresh.instance_id or self.base_instance
        return dataclasses.replace(fresh, instance_id=worker_instance_id(base, self.index))


def run_workers(config: GatewayConfig, build: ConfigBuilder) -> int:
    """Serve with `config.listen.workers` worker processes until SIGTERM or SIGINT; the exit
    status is 0 when every worker drained, the failing worker's status when one could not
    start, 1 otherwise. `build` re-reads the configuration (in each worker, also at reload)."""
    return Supervisor(config, build).run()


# --- the worker side -------------------------------------------------------------------------


def _worker_main(plan: WorkerPlan, ready: Connection) -> None:
    from gateway.configload import ConfigError
    from gateway.oplog import configure_logging
    from gateway.runtime import PolicyValidationError

    configure_logging()
    try:
        code = asyncio.run(_serve_worker(plan, ready))
    except (ConfigError, PolicyValidationError) as exc:
        log.error("worker could not start", extra={"worker": plan.index, "problem": str(exc)})
        code = 2
    except OSError as exc:
        log.error("worker could not start", extra={"worker": plan.index, "problem": str(exc)})
        code = 1
    sys.exit(code)


async def _serve_worker(plan: WorkerPlan, ready: Connection) -> int:
    from gateway.reload import fingerprint_config_source
    from gateway.runtime import Services
    from gateway.server.serve import serve
    from gateway.server.worker_metrics import WorkerMetrics

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    parent = multiprocessing.parent_process()

    def parent_gone(services: Services) -> None:
        # Nobody would forward SIGTERM any more, nor restart us: drain rather than linger.
        assert parent is not None
        loop.remove_reader(parent.sentinel)
        log.error("the supervising process is gone: draining")
        services.draining = True
        stop.set()

    def on_ready(services: Services, binds: list[tuple[str, int]]) -> None:
        with contextlib.suppress(OSError):
            ready.send({"instance": services.instance_id, "binds": binds})
        ready.close()
        if parent is not None:
            loop.add_reader(parent.sentinel, parent_gone, services)

    shared_metrics = (
        WorkerMetrics(plan.metrics_dir, str(plan.index)) if plan.metrics_dir is not None else None
    )
    config_seen = fingerprint_config_source(plan.config_source)  # before `build` reads it
    return await serve(
        plan.config(),
        stop=stop,
        on_ready=on_ready,
        reload_config=plan.config,
        worker_metrics=shared_metrics,
        config_seen=config_seen,
    )


# --- the parent side -------------------------------------------------------------------------


@dataclass(slots=True)
class _Slot:
    """One worker position; its process changes when the worker is restarted."""

    plan: WorkerPlan
    process: BaseProcess | None = None
    ready_pipe: Connection | None = None
    ready: bool = False
    instance: str | None = None
    started: float = 0.0
    failures: int = 0
    restart_at: float | None = None


class Supervisor:
    """Starts the workers, forwards signals to them, replaces the ones that die."""

    def __init__(self, config: GatewayConfig, build: ConfigBuilder) -> None:
        self.config = config
        self.context = multiprocessing.get_context("spawn")
        base = config.instance_id or default_instance_id()
        self.slots = [
            _Slot(WorkerPlan(index, base, build, config_source=config.source))
            for index in range(config.listen.workers)
        ]
        self.stopping = False
        self.stop_deadline: float | None = None
        self.all_ready_logged = False
        self.startup_failure: int | None = None
        self.unclean: list[str] = []
        self._wake_r, self._wake_w = socket.socketpair()

    def run(self) -> int:
        for sock in (self._wake_r, self._wake_w):
            sock.setblocking(False)
        previous = {signum: signal.getsignal(signum) for signum in FORWARDED}
        # The handlers do nothing themselves: the wake-up fd carries each signal's number to
        # the loop, which also wakes it from waiting on the workers.
        old_fd = signal.set_wakeup_fd(self._wake_w.fileno())
        for signum in FORWARDED:
            signal.signal(signum, _noted)
        # Private to this run (mode 0700); each worker's /metrics reads the others' from it.
        metrics_dir = tempfile.mkdtemp(
            prefix="gateway-metrics-", dir=os.environ.get("XDG_RUNTIME_DIR") or None
        )
        for slot in self.slots:
            slot.plan = dataclasses.replace(slot.plan, metrics_dir=metrics_dir)
        try:
            log.info(
                "starting workers",
                extra={"workers": len(self.slots), "instance": self.slots[0].plan.base_instance},
            )
            for slot in self.slots:
                self._start(slot)
            return self._loop()
        finally:
            self._kill_all()
            shutil.rmtree(metrics_dir, ignore_errors=True)
            signal.set_wakeup_fd(old_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._wake_r.close()
            self._wake_w.close()

    def _loop(self) -> int:
        while not (self.stopping and all(slot.process is None for slot in self.slots)):
            waitables: list[Any] = [self._wake_r]
            for slot in self.slots:
                if slot.process is not None:
                    waitables.append(slot.process.sentinel)
                if slot.ready_pipe is not None:
                    waitables.append(slot.ready_pipe)
            woken = wait(waitables, self._timeout())
            self._read_signals()
            self._read_ready(woken)
            self._reap()
            self._restart_due()
            self._enforce_stop_deadline()
        if self.startup_failure is not None:
            return self.startup_failure
        if self.unclean:
            log.error("stopped: not every worker drained", extra={"workers": self.unclean})
            return 1
        log.info("stopped", extra={"workers": len(self.slots)})
        return 0

    def _timeout(self) -> float | None:
        moments = [slot.restart_at for slot in self.slots if slot.restart_at is not None]
        if self.stop_deadline is not None:
            moments.append(self.stop_deadline)
        if not moments:
            return None
        return max(0.0, min(moments) - time.monotonic())

    # --- workers -------------------------------------------------------------------------

    def _start(self, slot: _Slot) -> None:
        reader, writer = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_worker_main,
            args=(slot.plan, writer),
            name=f"gateway-worker-{slot.plan.index}",
        )
        process.start()
        writer.close()  # the worker holds the only writer: its death reads as end of file
        slot.process, slot.ready_pipe, slot.ready = process, reader, False
        slot.started, slot.restart_at = time.monotonic(), None

    def _read_ready(self, woken: list[Any]) -> None:
        for slot in self.slots:
            pipe = slot.ready_pipe
            if pipe is None or pipe not in woken:
                continue
            try:
                message = pipe.recv()
            except (EOFError, OSError):
                message = None
            pipe.close()
            slot.ready_pipe = None
            if isinstance(message, dict):
                slot.ready, slot.instance = True, str(message.get("instance"))
                if self.all_ready_logged:
                    log.info("worker restarted", extra=self._describe(slot))
        if not self.all_ready_logged and all(slot.ready for slot in self.slots):
            self.all_ready_logged = True
            log.info("workers ready", extra={"workers": [self._describe(s) for s in self.slots]})

    def _reap(self) -> None:
        for slot in self.slots:
            process = slot.process
            if process is None or process.exitcode is None:
                continue
            code = process.exitcode
            process.join()
            process.close()
            lived = time.monotonic() - slot.started
            if slot.ready_pipe is not None:
                slot.ready_pipe.close()
            was_ready = slot.ready
            slot.process, slot.ready_pipe, slot.ready = None, None, False
            where = {"worker": slot.plan.index, "instance": slot.instance, "status": code}
            if self.stopping:
                # A worker that had not started serving had nothing to drain.
                if code != 0 and was_ready:
                    self.unclean.append(f"w{slot.plan.index}: status {code}")
                log.info("worker stopped", extra=where)
            elif not was_ready and not self.all_ready_logged:
                # At start-up a worker that cannot serve (port taken, bad policy) stops all.
                log.error("worker could not start: stopping", extra=where)
                self.startup_failure = code if code and code > 0 else 1
                self._begin_stop()
            else:
                if lived >= STABLE_AFTER:
                    slot.failures = 0
                delay = min(FIRST_BACKOFF * 2**slot.failures, MAX_BACKOFF)
                slot.failures += 1
                slot.restart_at = time.monotonic() + delay
                log.error("worker died: restarting", extra={**where, "restart_in_s": delay})

    def _restart_due(self) -> None:
        if self.stopping:
            return
        now = time.monotonic()
        for slot in self.slots:
            if slot.restart_at is not None and slot.restart_at <= now:
                self._start(slot)

    def _describe(self, slot: _Slot) -> dict[str, Any]:
        pid = slot.process.pid if slot.process is not None else None
        return {"worker": slot.plan.index, "instance": slot.instance, "pid": pid}

    # --- signals and stopping ------------------------------------------------------------

    def _read_signals(self) -> None:
        while True:
            try:
                data = self._wake_r.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            for signum in data:
                if signum == signal.SIGHUP:
                    log.info("reload: forwarding SIGHUP to the workers")
                    self._signal_all(signal.SIGHUP)
                elif signum in (signal.SIGTERM, signal.SIGINT):
                    self._begin_stop()

    def _begin_stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self.stop_deadline = time.monotonic() + self.config.server.shutdown_grace + STOP_MARGIN
            for slot in self.slots:
                slot.restart_at = None
            log.info("draining workers", extra={"workers": len(self.slots)})
        self._signal_all(signal.SIGTERM)

    def _signal_all(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signum)

    def _enforce_stop_deadline(self) -> None:
        if self.stop_deadline is None or time.monotonic() < self.stop_deadline:
            return
        for slot in self.slots:
            if slot.process is not None:
                log.error("worker did not drain in time: killed", extra=self._describe(slot))
                self.unclean.append(f"w{slot.plan.index}: killed after the drain deadline")
        self._kill_all()

    def _kill_all(self) -> None:
        for slot in self.slots:
            process = slot.process
            if process is None:
                continue
            if process.exitcode is None:
                process.kill()
            process.join()
            process.close()
            if slot.ready_pipe is not None:
                slot.ready_pipe.close()
            slot.process, slot.ready_pipe = None, None


def _noted(signum: int, frame: object) -> None:
    """Signal handler: the wake-up fd already told the supervisor loop."""
