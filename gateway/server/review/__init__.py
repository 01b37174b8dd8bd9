"""The reviewers' read-only audit page at /review/ (when `review.enabled`): its own aiohttp
sub-application, so that every response it gives, errors included, is HTML with the page's
security headers. Modules: `access` (who may look), `render` (templates, escaping), `pages`
(the routes). The reading itself is `gateway.review`'s.
"""

from __future__ import annotations

from aiohttp import web

from gateway.server.review.pages import build_review_app


def add_review(app: web.Application, prefix: str) -> None:
    async def to_index(request: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect(prefix + "/")

    app.router.add_get(prefix, to_index)
    app.add_subapp(prefix, build_review_app(app))


__all__ = ["add_review"]
