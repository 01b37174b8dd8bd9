"""Running the gateway: bind, serve, reload on SIGHUP, drain on SIGTERM.

SIGTERM first turns /readyz unready (so a load balancer stops sending), stops accepting,
lets requests in flight finish for up to `server.shutdown_grace` seconds, then writes the
final audit records (and a checkpoint when signing) and returns, so the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.reload import Fingerprint, ReloadController, startup_fingerprints
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.server.drain import CUT_OFF
from gateway.server.guard import GUARD, ConnectionGuard
from gateway.server.proxy.listener import install_forward_proxy
from gateway.server.worker_metrics import SNAPSHOT_INTERVAL, WorkerMetrics

log = logging.getLogger("gateway.serve")

CHECKPOINT_TICK = 1.0
CHECKPOINT_LOG_EVERY = 60.0
GC_YOUNG_THRESHOLD = 5000  # CPython's default is 700 container allocations
IDLE_POLL = 0.05
# After the grace, tool calls are cancelled; this is how long they then get to write their
# audit records and answer before aiohttp drops what is left.
CUTOFF_ALLOWANCE = 5.0


async def serve(
    config: GatewayConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[Services, list[tuple[str, int]]], Awaitable[None] | None] | None = None,
    reload_config: Callable[[], GatewayConfig] | None = None,
    worker_metrics: WorkerMetrics | None = None,
    config_seen: Mapping[str, Fingerprint] | None = None,
) -> int:
    """`config_seen`: the configuration file's fingerprint from before it was read
    (`fingerprint_config_source`), so that an edit made while it was read is a change."""
    loaded = startup_fingerprints(config, config_seen)
    services = Services(config)
    try:
        if services.shared is not None:
            await services.shared.start()
        install_forward_proxy(services)
        app = make_app(services)
        guard = ConnectionGuard(
            header_timeout=config.server.header_timeout,
            max_per_ip=config.server.max_connections_per_ip,
        )
        app[GUARD] = guard
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=config.server.keepalive_timeout,
            shutdown_timeout=CUTOFF_ALLOWANCE,
        )
        await runner.setup()
    except BaseException:
        await services.close()  # the audit log's final record, the pools, Redis
        raise
    stop = stop or asyncio.Event()
    binds: list[tuple[str, int]] = []
    snapshots: asyncio.Future[None] | None = None
    listener: asyncio.Server | None = None
    opened = False
    try:
        # Written before the port opens, so the other workers' scrapes count this one at once.
        snapshots = _share_metrics(services, worker_metrics)
        # Several workers (gateway/server/workers.py) share the port; the kernel spreads the
        # connections between them. aiohttp's server is the protocol factory (its low-level
        # API), each connection behind the guard (header_timeout, max_connections_per_ip).
        assert runner.server is not None
        listener = await asyncio.get_running_loop().create_server(
            guard.protocol_factory(runner.server),
            config.listen.host or None,
            config.listen.port,
            reuse_address=True,
            reuse_port=config.listen.workers > 1 or None,
        )
        binds.extend(_bound(listener))
        for hook in services.extra_sites:
            binds.extend(await hook(services))
        # The audit log opens (log_start) only once every port is bound: a start that fails
        # to bind writes nothing. A request in the moment between is refused, as any request
        # the log cannot record is.
        services.open()
        opened = True
        await services.listen_on(binds)
        _install_signals(services, stop)
        log.info(
            "listening",
            extra={
                "binds": binds,
                "instance": services.instance_id,
                "audit": services.audit.path,
                "policy": services.state.default_policy.name,
                "clients": len(services.state.clients),
            },
        )
        if on_ready is not None:
            maybe = on_ready(services, binds)
            if maybe is not None:
                await maybe
        # SIGHUP and file changes reload through one controller, which also keeps the keys
        # that need a restart and reports them in /v1/status.
        reloader = ReloadController(services, reload_config, seen=loaded)
        reloader.install_sighup()
        services.status_providers["reload"] = reloader.status
        watcher = asyncio.ensure_future(reloader.watch())
        ticker = asyncio.ensure_future(_tick(services, stop))
        _settle_garbage_collector()
        await stop.wait()
        ticker.cancel()
        watcher.cancel()
        await reloader.close()
        services.draining = True
        await _drain(services, runner, listener, config.server.shutdown_grace)
    finally:
        if listener is not None:
            listener.close()
        if snapshots is not None:
            snapshots.cancel()
        if worker_metrics is not None:
            worker_metrics.close()
        await runner.cleanup()
        await services.close()
        if opened:
            log.info("stopped", extra={"audit_seq": services.audit.seq})
    return 0


def _share_metrics(services: Services, shared: WorkerMetrics | None) -> asyncio.Future[None] | None:
    """With several workers, /metrics answers every live worker's series (one snapshot a
    second from each); without the shared directory it answers this worker's alone."""
    if shared is None:
        return None
    try:
        shared.open()
    except OSError as exc:
        log.error("metrics are not shared with the other workers", extra={"error": str(exc)})
        return None
    services.metrics.merge = shared.merge
    return asyncio.ensure_future(shared.run(services.metrics.render_own, SNAPSHOT_INTERVAL))


def _bound(server: asyncio.Server) -> list[tuple[str, int]]:
    out = []
    for sock in server.sockets:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host, port = sock.getsockname()[:2]
            out.append((host, port))
    return out


def _settle_garbage_collector() -> None:
    """What start-up built (policies, tables, the app) lives as long as the process: frozen,
    the collector stops walking it again and again under load, and a larger first generation
    lets a request's short-lived objects go before they are promoted."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


async def _tick(services: Services, stop: asyncio.Event) -> None:
    """Periodic work: signed checkpoints also when idle, and probes of a failing audit log."""
    last_logged = -CHECKPOINT_LOG_EVERY
    while not stop.is_set():
        await asyncio.sleep(CHECKPOINT_TICK)
        try:
            # A log that could not be written is tried again, so it recovers (and /readyz
            # turns ready) once space returns, also when no request comes to try it.
            services.audit.probe()
            services.audit.maybe_checkpoint()
            services.auth_failures.flush()  # the counts of windows that ended
        except Exception:
            # Audit write failures are logged by the log itself; anything else (a signing
            # error, a bug) is logged here, at most once a minute rather than every tick.
            now = time.monotonic()
            if now - last_logged >= CHECKPOINT_LOG_EVERY:
                last_logged = now
                log.exception("writing a signed audit checkpoint failed")


async def _drain(
    services: Services, runner: web.AppRunner, listener: asyncio.Server, grace: float
) -> None:
    """Unready (already, from the signal handler), stop accepting, wait for what is in flight
    up to `grace`, then cancel the tool calls still running (each audited, answered 503)."""
    services.metrics.draining.set(1)
    log.info("draining", extra={"in_flight": services.metrics.busy, "grace_s": grace})
    for stopper in services.on_drain:
        try:
            await stopper()
        except Exception:
            log.exception("a drain hook failed")
    listener.close()  # no new connections; those open finish below
    if runner.server is not None:
        # Idle keep-alive connections close now; busy ones after their response.
        runner.server.pre_shutdown()
    log.info("listeners closed", extra={"in_flight": services.metrics.busy})
    if await _wait_idle(services, grace):
        log.info("drained", extra={"in_flight": 0})
        return
    log.warning(
        "shutdown grace over: cutting off requests in flight",
        extra={"in_flight": services.metrics.busy, "grace_s": grace},
    )
    # Cancelled tool calls are audited and answered `unavailable` by the cut-off middleware.
    cut = runner.app[CUT_OFF].cut()
    if not await _wait_idle(services, CUTOFF_ALLOWANCE):
        log.error(
            "requests still in flight after the cut-off",
            extra={"in_flight": services.metrics.busy, "cut": cut},
        )


async def _wait_idle(services: Services, timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while services.metrics.busy > 0:
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(IDLE_POLL)
    return True


def _install_signals(services: Services, stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT drain; SIGHUP belongs to the ReloadController."""
    loop = asyncio.get_running_loop()

    def on_term() -> None:
        # Unready first: /readyz answers 503 from this moment, before any listener closes.
        services.draining = True
        stop.set()

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, on_term)
        loop.add_signal_handler(signal.SIGINT, on_term)
