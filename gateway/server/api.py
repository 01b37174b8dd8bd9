"""The HTTP API routes: parse, call a tool, serialise. No business logic lives here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway import __version__
from gateway.errors import GatewayError, UnavailableError
from gateway.server.handles import REQUEST_ID, SERVICES, caller, json_response, read_json
from gateway.tools.context import CallContext
from gateway.tools.explain import explain as explain_url
from gateway.tools.registry import ToolSpec
from gateway.tools.schema import EXPLAIN_REQUEST, validate, with_defaults


def context(request: web.Request) -> CallContext:
    services = request.app[SERVICES]
    client = caller(request)
    policy = client.policy if client else services.state.default_policy
    return CallContext(
        policy=policy, client_id=client.id if client else None, request_id=request[REQUEST_ID]
    )


def tool_handler(spec: ToolSpec) -> Callable[[web.Request], Awaitable[web.Response]]:
    """POST handler for one registered tool: parse, call through the tool layer, serialise."""

    async def handle(request: web.Request) -> web.Response:
        try:
            body = await read_json(request)
        except GatewayError as error:  # not a JSON object, too large, draining: one record
            request.app[SERVICES].tools.record_refusal(spec.name, context(request), error)
            raise
        result = await spec.call(context(request), body)
        return json_response(result)

    return handle


async def explain(request: web.Request) -> web.Response:
    body = await read_json(request)
    validate(EXPLAIN_REQUEST, body)
    args = with_defaults(EXPLAIN_REQUEST, body)
    ctx = context(request)
    fetcher = request.app[SERVICES].fetcher
    verdict = await explain_url(
        ctx.policy,
        args["url"],
        tool=args["tool"],
        resolve=args["resolve"],
        static_hosts=fetcher.static_hosts,
        own_addresses=fetcher.own_addresses,
    )
    decision = verdict.decision
    out: dict[str, Any] = {
        "url": args["url"],
        "decision": verdict.verdict,
        "reason": verdict.reason,
        "rule": verdict.rule,
        "enforced": verdict.enforced,
        "message": verdict.message,
        "hint": verdict.hint,
        "policy": ctx.policy.identity,
    }
    if verdict.lookup_error is not None:
        out["lookup_error"] = verdict.lookup_error
    if args["resolve"] and verdict.checked_addresses:  # asked, and the name was allowed
        out["addresses"] = [str(ip) for ip in verdict.addresses]
    if decision.dlp is not None:
        out["dlp"] = decision.dlp.to_record()
    return json_response(out)


async def status(request: web.Request) -> web.Response:
    return json_response(await status_body(request))


async def status_body(request: web.Request) -> dict[str, Any]:
    """What GET /v1/status (and MCP's Status tool) shows this caller."""
    services = request.app[SERVICES]
    client = caller(request)
    policy = client.policy if client else services.state.default_policy
    reload = services.reload_status
    body: dict[str, Any] = {
        "version": __version__,
        "instance": services.instance_id,
        "uptime_s": round(services.uptime_s, 3),
        "started_at": services.started_at,
        "client": {"id": client.id} if client else None,
        "policy": {
            "name": policy.name,
            "sha256": policy.sha256,
            "mode": str(policy.mode),
            "loaded_at": services.state.loaded_at,
            "last_reload": reload.last_reload,
            "reload_ok": reload.ok,
            "problems": list(reload.problems),
        },
        "audit": services.audit.status(),
        "draining": services.draining,
    }
    for name, provider in services.status_providers.items():
        body[name] = await provider()
    return body


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    problems = services.readiness_problems()
    if problems:
        error = UnavailableError("not ready: " + "; ".join(problems), retry_after=5)
        raise error
    body: dict[str, Any] = {"status": "ready"}
    # Redis down with `on_failure: open`: requests pass, but a load balancer or a person
    # reading the probe should see that limits and caches are no longer shared.
    if services.shared is not None and (degraded := services.shared.state.degradation()):
        body["degraded"] = [degraded]
    return json_response(body)


def add_routes(app: web.Application) -> None:
    for spec in app[SERVICES].tools.all():
        app.router.add_post(spec.path, tool_handler(spec))
    app.router.add_post("/v1/policy/explain", explain)
    app.router.add_get("/v1/status", status)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
