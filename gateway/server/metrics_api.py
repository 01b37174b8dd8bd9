"""`GET /metrics` (Prometheus text format) and the middleware that counts API requests.

Only translates: the values live in `gateway.metrics.Metrics`. Whether /metrics needs a token
(`server.metrics_need_token`) is the authentication middleware's decision.
"""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.server.handles import SERVICES, Handler

UNMATCHED = "unmatched"


@web.middleware
async def observe_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """In-flight gauge and latency by route template (never the raw path: it is unbounded)."""
    metrics = request.app[SERVICES].metrics
    started = time.perf_counter()
    status = 500
    metrics.request_started()
    try:
        response = await handler(request)
        status = response.status
        return response
    finally:
        route = request.match_info.route
        resource = route.resource if route is not None else None
        label = resource.canonical if resource is not None else UNMATCHED
        metrics.request_finished(label, status, time.perf_counter() - started)


async def metrics(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    services.metrics.draining.set(1.0 if services.draining else 0.0)
    body = await services.metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/metrics", metrics)
