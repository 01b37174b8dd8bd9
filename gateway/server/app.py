"""The aiohttp application, assembled: the middlewares in their order, the routes, the
services under `SERVICES`. It decides nothing; the routes' shared handles are `handles.py`'s.
"""

from __future__ import annotations

from aiohttp import web

from gateway.runtime import Services
from gateway.server import api, drain, guard, keys_api, mcp, metrics_api, openapi
from gateway.server.handles import SERVICES
from gateway.server.middleware import REVIEW_PREFIX, api_error_shape, authenticate
from gateway.server.review import add_review


def make_app(services: Services) -> web.Application:
    app = web.Application(
        middlewares=[
            guard.watch_heads,
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
        add_review(app, REVIEW_PREFIX)
    return app
