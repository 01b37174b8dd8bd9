"""Cutting off tool calls that outlive `server.shutdown_grace`, without losing their records.

The serve loop calls `CutOff.cut()` when the grace is over: every tool call still running is
cancelled, and this middleware turns that cancellation into an audited `unavailable` answer,
so traffic never ends unrecorded (CONTRACT 8, fail closed). It decides nothing else.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from gateway.errors import AuditWriteError, UnavailableError
from gateway.server.app import REQUEST_ID, SERVICES, Handler, caller, error_response
from gateway.tools.context import CallContext
from gateway.tools.records import tool_record

CUT_OFF_MESSAGE = "the gateway shut down before this call finished (server.shutdown_grace)"


class CutOff:
    """The tool calls in flight in one app, and whether the grace is over."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.active = False

    def cut(self) -> int:
        """Cancel every tool call still running; returns how many."""
        self.active = True
        running = [task for task in self.tasks if not task.done()]
        for task in running:
            task.cancel(CUT_OFF_MESSAGE)
        return len(running)


CUT_OFF = web.AppKey("cut_off", CutOff)


@web.middleware
async def audit_cut_offs(request: web.Request, handler: Handler) -> web.StreamResponse:
    services = request.app[SERVICES]
    spec = services.tools.at_path(request.path)
    task = asyncio.current_task()
    if spec is None or request.method != "POST" or task is None:
        return await handler(request)
    cut_off = request.app[CUT_OFF]
    started = time.monotonic()
    cut_off.tasks.add(task)
    try:
        return await handler(request)
    except asyncio.CancelledError:
        if not cut_off.active:
            raise
        task.uncancel()
        return await _answer_cut_off(request, spec.name, started)
    finally:
        cut_off.tasks.discard(task)


async def _answer_cut_off(request: web.Request, tool: str, started: float) -> web.Response:
    services = request.app[SERVICES]
    client = caller(request)
    ctx = CallContext(
        policy=client.policy if client else services.state.default_policy,
        client_id=client.id if client else None,
        request_id=request[REQUEST_ID],
        started=started,
    )
    error = UnavailableError(CUT_OFF_MESSAGE, retry_after=5)
    record = tool_record(tool, ctx, decision=None, error=error, **_requested(request))
    try:
        services.audit.append(record)
    except AuditWriteError as exc:
        return error_response(exc, request[REQUEST_ID])
    return error_response(error, request[REQUEST_ID])


def _requested(request: web.Request) -> dict[str, Any]:
    """What the call asked for, from the body aiohttp already read (never re-read here)."""
    raw = getattr(request, "_read_bytes", None)
    try:
        body = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        return {}
    if isinstance(body.get("url"), str):
        return {"url": {"original": body["url"][:4096]}}
    return {}
