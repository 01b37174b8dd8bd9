"""The middlewares every request of the API passes: its response shape and its gatekeeper.

Every response carries `X-Request-Id`; every error, the router's 404/405 included, is the
API's JSON error body (except on /mcp, which answers in JSON-RPC). Bearer tokens are checked,
and every POST counts against the caller's limits, before a route sees the request (and
each further tool call of an MCP batch counts again, in mcp.py).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from aiohttp import web

from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    NotFoundError,
    ReviewerTokenError,
    UnauthorizedError,
    WrongMethodError,
)
from gateway.runtime import Services
from gateway.server.handles import (
    ADMISSION,
    CLIENT,
    REQUEST_ID,
    SERVICES,
    Admission,
    Handler,
    body_too_large,
    error_response,
    record_auth_failure,
    request_body,
    throttled,
)
from gateway.server.mcp import tool_calls
from gateway.tools.context import CallContext

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/v1/keys", "/openapi.json"})
REVIEW_PREFIX = "/review"  # the review page checks its own reviewers (server/review)

log = logging.getLogger("gateway.server")


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
        return error_response(body_too_large(request), request_id)
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
        wait = record_auth_failure(request, error.message, client_hint=None)
        if wait is not None:
            raise throttled(wait) from None
        raise
    if client is None:
        return await handler(request)
    if client.is_reviewer:
        message = f"client {client.id!r} is a reviewer: its token opens {REVIEW_PREFIX}/ only"
        wait = record_auth_failure(request, message, client_hint=client.id)
        if wait is not None:
            raise throttled(wait)
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
    request[ADMISSION] = Admission(lease)
    try:
        return await handler(request)
    finally:
        await lease.release()


async def _mcp_tool_calls(request: web.Request) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls a refused /mcp POST held (mcp.tool_calls); none for a body over
    server.max_body_bytes or one that stopped arriving."""
    try:
        raw = await request_body(request)
    except GatewayError:  # over server.max_body_bytes, or it stopped arriving
        return []
    return tool_calls(raw, request.app[SERVICES].tools)


def _is_review_page(path: str, services: Services) -> bool:
    return services.config.review.enabled and (
        path == REVIEW_PREFIX or path.startswith(REVIEW_PREFIX + "/")
    )
