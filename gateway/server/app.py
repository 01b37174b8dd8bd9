"""The aiohttp application: middlewares that give every response the API's shape.

Every response carries `X-Request-Id`; every error, the router's 404/405 included, is the
API's JSON error body (except on /mcp, which answers in JSON-RPC). Handlers find the
services through `SERVICES`; there are no globals.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    NotFoundError,
    RequestTooLargeError,
    ReviewerTokenError,
    UnauthorizedError,
    UnavailableError,
    WrongMethodError,
)
from gateway.runtime import ClientIdentity, Services
from gateway.tools import jsonwire
from gateway.tools.context import CallContext
from gateway.tools.records import auth_failure_record

SERVICES = web.AppKey("services", Services)
REQUEST_ID = web.RequestKey("request_id", str)
CLIENT = web.RequestKey("client", ClientIdentity)
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/v1/keys", "/openapi.json"})
REVIEW_PREFIX = "/review"  # the review page checks its own reviewers (server/review)

log = logging.getLogger("gateway.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=jsonwire.dumps(body), status=status, content_type="application/json", headers=headers
    )


def error_response(error: GatewayError, request_id: str) -> web.Response:
    headers = {"X-Request-Id": request_id}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, int(error.retry_after + 0.999)))
    return json_response(
        {"error": error.to_dict(request_id)}, status=error.http_status, headers=headers
    )


@web.middleware
async def api_error_shape(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Request ids, and every failure rendered as the API's error body."""
    request_id = uuid.uuid4().hex
    request[REQUEST_ID] = request_id
    try:
        response = await handler(request)
    except GatewayError as error:
        return error_response(error, request_id)
    except web.HTTPRequestEntityTooLarge:
        return error_response(_body_too_large(request), request_id)
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        response = error_response(
            WrongMethodError(f"{request.method} is not allowed here; use {allowed}"), request_id
        )
        response.headers["Allow"] = allowed
        return response
    except web.HTTPNotFound:
        return error_response(NotFoundError(f"no endpoint {request.path[:200]}"), request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        generic: GatewayError = InvalidRequestError(exc.reason or "bad request")
        if exc.status >= 500:
            generic = GatewayError(exc.reason or "internal error")
        return error_response(generic, request_id)
    except Exception:
        log.exception("unhandled error", extra={"request_id": request_id})
        return error_response(GatewayError("internal error; see the gateway's log"), request_id)
    response.headers["X-Request-Id"] = request_id
    return response


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bearer tokens once clients are configured; /mcp authenticates the same way. A
    reviewer's token opens only the review page, which authenticates its own visitors."""
    services = request.app[SERVICES]
    path = request.path
    metrics_public = path == "/metrics" and not services.config.server.metrics_need_token
    if path in PUBLIC_PATHS or metrics_public or _is_review_page(path, services):
        return await handler(request)
    try:
        client = services.state.authenticate(request.headers.get("Authorization"))
    except UnauthorizedError as error:
        record_auth_failure(request, error.message, client_hint=None)
        raise
    if client is None:
        return await handler(request)
    if client.is_reviewer:
        message = f"client {client.id!r} is a reviewer: its token opens {REVIEW_PREFIX}/ only"
        record_auth_failure(request, message, client_hint=client.id)
        raise ReviewerTokenError(message)
    request[CLIENT] = client
    if request.method != "POST":
        return await handler(request)
    # Every tool call, explain and MCP message counts against the client's limits.
    try:
        lease = await services.limiter.acquire(client.id, client.limits)
    except GatewayError as error:  # a refused tool call is still one record
        ctx = CallContext(policy=client.policy, client_id=client.id, request_id=request[REQUEST_ID])
        spec = services.tools.at_path(path)
        if spec is not None:
            services.tools.record_refusal(spec.name, ctx, error)
        elif path == "/mcp":
            for name, arguments in await _mcp_tool_calls(request):
                services.tools.record_refusal(name, ctx, error, arguments)
        raise
    try:
        return await handler(request)
    finally:
        await lease.release()


async def _mcp_tool_calls(request: web.Request) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls a refused /mcp POST held (mcp.tool_calls); none for a body over
    server.max_body_bytes."""
    from gateway.server.mcp import tool_calls  # mcp.py imports this module

    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return []
    return tool_calls(raw, request.app[SERVICES].tools)


def record_auth_failure(
    request: web.Request, message: str, *, client_hint: str | None, transport: str | None = None
) -> None:
    """The `auth_failure` record of a refused credential (`client_hint`: a configured client
    id it named, never the token)."""
    request.config_dict[SERVICES].audit.append(
        auth_failure_record(
            transport=transport or ("mcp" if request.path == "/mcp" else "api"),
            message=message,
            client_hint=client_hint,
            source=_peer(request),
            request_id=request.get(REQUEST_ID),
        )
    )


def _is_review_page(path: str, services: Services) -> bool:
    return services.config.review.enabled and (
        path == REVIEW_PREFIX or path.startswith(REVIEW_PREFIX + "/")
    )


def _peer(request: web.Request) -> tuple[str, int] | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return (str(peer[0]), int(peer[1])) if peer else None


def caller(request: web.Request) -> ClientIdentity | None:
    return request.get(CLIENT)


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or invalid_request."""
    if request.app[SERVICES].draining:
        raise UnavailableError("the gateway is shutting down", retry_after=5)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _body_too_large(request) from None
    try:
        value = jsonwire.loads_request(raw)
    except jsonwire.RequestJSONError as exc:
        raise InvalidRequestError(str(exc)) from None
    if not isinstance(value, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    repeated = jsonwire.repeated_key(value)
    if repeated is not None:
        raise InvalidRequestError(
            f"the request body names {repeated!r} more than once; send each field once"
        )
    return value


def _body_too_large(request: web.Request) -> RequestTooLargeError:
    limit = request.app[SERVICES].config.server.max_body_bytes
    return RequestTooLargeError(f"the request body is over server.max_body_bytes ({limit})")


def make_app(services: Services) -> web.Application:
    from gateway.server import (  # the routes import this module's helpers
        api,
        drain,
        keys_api,
        mcp,
        metrics_api,
        openapi,
    )

    app = web.Application(
        middlewares=[
            metrics_api.observe_requests,
            api_error_shape,
            mcp.mcp_shape,
            authenticate,
            drain.audit_cut_offs,
        ],
        client_max_size=services.config.server.max_body_bytes,
    )
    app[SERVICES] = services
    app[drain.CUT_OFF] = drain.CutOff()
    api.add_routes(app)
    mcp.add_routes(app)
    keys_api.add_routes(app)
    openapi.add_routes(app)
    metrics_api.add_routes(app)
    if services.config.review.enabled:
        from gateway.server.review import add_review

        add_review(app, REVIEW_PREFIX)
    return app
