"""The handles every route shares: the app's keys, the caller, the JSON body in and out.

Routes and middlewares import these from here, and `app.py` imports the routes: the app only
assembles, and no route reaches back into it. Handlers find the services through `SERVICES`;
there are no globals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    RateLimitedError,
    RequestTooLargeError,
    UnavailableError,
)
from gateway.limits import Lease
from gateway.runtime import ClientIdentity, Services
from gateway.server.guard import read_body
from gateway.tools import jsonwire


@dataclass(slots=True)
class Admission:
    """The lease a POST took against its client's limits. It pays for the POST's first tool
    call; every further call of a JSON-RPC batch takes a lease of its own (mcp.py)."""

    lease: Lease
    spent: bool = False


SERVICES = web.AppKey("services", Services)
REQUEST_ID = web.RequestKey("request_id", str)
CLIENT = web.RequestKey("client", ClientIdentity)
ADMISSION = web.RequestKey("admission", Admission)

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


def caller(request: web.Request) -> ClientIdentity | None:
    return request.get(CLIENT)


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or invalid_request."""
    if request.app[SERVICES].draining:
        raise UnavailableError("the gateway is shutting down", retry_after=5)
    raw = await request_body(request)
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


async def request_body(request: web.Request) -> bytes:
    """The body, read once under `server.max_body_bytes` and, per wait for more bytes,
    `server.header_timeout` (guard.read_body)."""
    server = request.app[SERVICES].config.server
    return await read_body(request, limit=server.max_body_bytes, timeout=server.header_timeout)


def body_too_large(request: web.Request) -> RequestTooLargeError:
    limit = request.app[SERVICES].config.server.max_body_bytes
    return RequestTooLargeError(f"the request body is over server.max_body_bytes ({limit})")


def record_auth_failure(
    request: web.Request, message: str, *, client_hint: str | None, transport: str | None = None
) -> float | None:
    """Count a refused credential (`client_hint`: a configured client id it named, never the
    token): its `auth_failure` record, or its count in its address's window (one record per
    window, tools/authfailures.py). Returns the seconds its address is throttled for, if it
    is (the caller answers 429 then), else None."""
    return request.config_dict[SERVICES].auth_failures.failed(
        transport=transport or ("mcp" if request.path == "/mcp" else "api"),
        message=message,
        client_hint=client_hint,
        source=_peer(request),
        request_id=request.get(REQUEST_ID),
    )


def throttled(retry_after: float) -> RateLimitedError:
    return RateLimitedError(
        "too many failed credentials from this address; wait before trying again",
        retry_after=retry_after,
    )


def _peer(request: web.Request) -> tuple[str, int] | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return (str(peer[0]), int(peer[1])) if peer else None
