"""Cutting off tool calls that outlive `server.shutdown_grace`, without losing their records.

The serve loop calls `CutOff.cut()` when the grace is over: every tool call still running is
cancelled, and the middleware (HTTP API) or `call_until_cut_off` (MCP's tools/call) turns that
cancellation into an audited `unavailable` answer, so traffic never ends unrecorded
(fail closed: nothing unrecorded). The cancellation carries `CUT_OFF_MESSAGE` down to the work the
call started: Research records each page it was still reading with it, before this module
records the call. It decides nothing else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from gateway.audit.log import AuditLog
from gateway.errors import AuditWriteError, UnavailableError
from gateway.server.guard import BODY
from gateway.server.handles import REQUEST_ID, SERVICES, Handler, caller, error_response
from gateway.tools import jsonwire
from gateway.tools.context import CallContext
from gateway.tools.records import tool_record
from gateway.tools.registry import ToolSpec

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


async def call_until_cut_off(
    request: web.Request, spec: ToolSpec, ctx: CallContext, arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """One tool call inside a request that is not a tool route (MCP's tools/call), cut off
    at the end of the grace like the HTTP API's: raises the audited `UnavailableError` (or
    the `AuditWriteError` that refused it), which the caller answers as a tool error."""
    cut_off = request.app[CUT_OFF]
    task = asyncio.current_task()
    if cut_off.active:  # a later call of a batch, after the cut: never started, still on record
        raise _record_cut_off(request.app[SERVICES].audit, spec.name, ctx, arguments)
    if task is None:
        return await spec.call(ctx, arguments)
    cut_off.tasks.add(task)
    try:
        return await spec.call(ctx, arguments)
    except asyncio.CancelledError:
        if not cut_off.active:
            raise
        task.uncancel()
        raise _record_cut_off(request.app[SERVICES].audit, spec.name, ctx, arguments) from None
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
    return error_response(
        _record_cut_off(services.audit, tool, ctx, _body(request)), ctx.request_id
    )


def _record_cut_off(
    audit: AuditLog, tool: str, ctx: CallContext, arguments: Mapping[str, Any]
) -> UnavailableError:
    """Audit one cut-off call; the error to answer with (the audit log's own when it failed)."""
    error = UnavailableError(CUT_OFF_MESSAGE, retry_after=5)
    url = arguments.get("url")
    requested = {"original": url[:4096]} if isinstance(url, str) else None
    try:
        audit.append(tool_record(tool, ctx, decision=None, error=error, url=requested))
    except AuditWriteError as exc:
        return exc
    return error


def _body(request: web.Request) -> Mapping[str, Any]:
    """What the call asked for, from the body aiohttp already read (never re-read here)."""
    raw = request.get(BODY)
    try:
        body = jsonwire.loads_request(raw) if raw else None
    except jsonwire.RequestJSONError:
        body = None
    return body if isinstance(body, dict) else {}
