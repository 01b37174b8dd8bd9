"""Yardstick relays for bench/fetch.py: what `POST /v1/fetch` costs without the gateway.

`bare`: fetch the URL with one keep-alive aiohttp client session and answer the body's
SHA-256 in JSON; no policy, no extraction, no audit. The floor any Python fetch API pays.
`text`: the same, and the body's text in the answer too (`json.dumps`), as the research
note's `aiohttp-ref/fetch` (about 780 req/s there): what a fetch API that returns the page
costs at the least.
`trafilatura`: the same, plus trafilatura's Markdown extraction of the page (comments off)
in a worker thread, answered with the text; what a readable-article mode costs elsewhere.

These relays are measuring sticks only; they never guard anything. Run one per process:

    .venv/bin/python bench/relays.py --kind bare --port 8101
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
from typing import Any

import aiohttp
from aiohttp import web

SESSION = web.AppKey("session", aiohttp.ClientSession)


def extract_markdown(body: bytes) -> str:
    import trafilatura

    text = trafilatura.extract(body, output_format="markdown", include_comments=False)
    return text or ""


async def _session(app: web.Application) -> Any:
    connector = aiohttp.TCPConnector(limit=256, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector) as session:
        app[SESSION] = session
        yield


def make_app(kind: str) -> web.Application:
    async def fetch(request: web.Request) -> web.Response:
        url = (await request.json())["url"]
        async with request.app[SESSION].get(url) as resp:
            body = await resp.read()
            status = resp.status
        out: dict[str, Any] = {
            "url": url,
            "status": status,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
        }
        if kind == "text":
            out["content"] = body.decode("utf-8", "replace")
        if kind == "trafilatura":
            loop = asyncio.get_running_loop()
            out["content"] = await loop.run_in_executor(None, extract_markdown, body)
        return web.Response(body=json.dumps(out).encode(), content_type="application/json")

    app = web.Application()
    app.cleanup_ctx.append(_session)
    app.router.add_post("/v1/fetch", fetch)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("bare", "text", "trafilatura"), required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    if args.kind == "trafilatura":
        extract_markdown(b"<html><body><p>warm up the imports</p></body></html>")
    web.run_app(make_app(args.kind), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
