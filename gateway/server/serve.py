"""Running the gateway: bind, serve, reload on SIGHUP, drain on SIGTERM.

SIGTERM first turns /readyz unready (so a load balancer stops sending), stops accepting,
lets requests in flight finish for up to `server.shutdown_grace` seconds, then writes the
final audit records (and a checkpoint when signing) and returns, so the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.fetch.resolver import own_listening_addresses
from gateway.reload import ReloadController
from gateway.runtime import Services
from gateway.server.app import make_app
from gateway.server.proxy import install_forward_proxy

log = logging.getLogger("gateway.serve")

CHECKPOINT_TICK = 1.0


async def serve(
    config: GatewayConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[Services, list[tuple[str, int]]], Awaitable[None] | None] | None = None,
    reload_config: Callable[[], GatewayConfig] | None = None,
) -> int:
    services = Services(config)
    services.open()
    install_forward_proxy(services)
    stop = stop or asyncio.Event()
    app = make_app(services)
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        keepalive_timeout=config.server.keepalive_timeout,
        shutdown_timeout=config.server.shutdown_grace,
    )
    await runner.setup()
    binds: list[tuple[str, int]] = []
    try:
        site = web.TCPSite(runner, config.listen.host, config.listen.port, reuse_address=True)
        await site.start()
        binds.extend(_bound(site))
        for hook in services.extra_sites:
            binds.extend(await hook(services))
        await services.fetcher.set_own_addresses(own_listening_addresses(binds))
        _install_signals(services, stop, reload_config)
        log.info("listening", extra={"binds": binds, "instance": services.instance_id})
        if on_ready is not None:
            maybe = on_ready(services, binds)
            if maybe is not None:
                await maybe
        # SIGHUP and file changes reload through one controller, which also keeps the keys
        # that need a restart and reports them in /v1/status (it replaces the plain handler).
        reloader = ReloadController(services, reload_config)
        reloader.install_sighup()
        services.status_providers["reload"] = reloader.status
        watcher = asyncio.ensure_future(reloader.watch())
        ticker = asyncio.ensure_future(_tick(services, stop))
        await stop.wait()
        ticker.cancel()
        watcher.cancel()
        services.draining = True
        await _drain(services, runner, config.server.shutdown_grace)
    finally:
        await runner.cleanup()
        await services.close()
    return 0


def _bound(site: web.TCPSite) -> list[tuple[str, int]]:
    server = site._server
    sockets: list[Any] = list(getattr(server, "sockets", []) or [])
    out = []
    for sock in sockets:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host, port = sock.getsockname()[:2]
            out.append((host, port))
    return out


async def _tick(services: Services, stop: asyncio.Event) -> None:
    """Periodic work: signed checkpoints also when idle."""
    while not stop.is_set():
        await asyncio.sleep(CHECKPOINT_TICK)
        with contextlib.suppress(Exception):
            services.audit.maybe_checkpoint()


async def _drain(services: Services, runner: web.AppRunner, grace: float) -> None:
    for stopper in services.on_drain:
        with contextlib.suppress(Exception):
            await stopper()
    # Closing the sites stops accepting; runner.cleanup() then waits up to shutdown_timeout
    # for requests in flight before cancelling them.
    for site in list(runner.sites):
        await site.stop()


def _install_signals(
    services: Services, stop: asyncio.Event, reload_config: Callable[[], GatewayConfig] | None
) -> None:
    loop = asyncio.get_running_loop()

    def on_term() -> None:
        services.draining = True
        stop.set()

    def on_hup() -> None:
        config = None
        if reload_config is not None:
            try:
                config = reload_config()
            except Exception as exc:  # a broken config keeps the running state
                services.reload_failed(str(exc))
                return
        services.reload(config)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, on_term)
        loop.add_signal_handler(signal.SIGINT, on_term)
        loop.add_signal_handler(signal.SIGHUP, on_hup)
