"""A hostile web on loopback: one aiohttp app whose routes play the upstreams tests need, and
a raw scripted upstream for the bytes no HTTP server library would send."""

from __future__ import annotations

import asyncio
import functools
import gzip
import socket
import zlib

import brotli
from aiohttp import web

PAGE = b"""<!doctype html><html><head><title>Test page</title>
<meta name="description" content="A page for tests"></head>
<body><nav>menu</nav><article><h1>Hello</h1><p>First paragraph with <a href="/x">a link</a>.</p>
<h2>Part two</h2><p>Second paragraph.</p></article><footer>footer</footer></body></html>"""


@functools.cache
def bombs() -> dict[str, bytes]:
    """100 MB of zeros, compressed once per test session (about 100 KB each)."""
    zeros = b"\0" * 100_000_000
    return {"gzip": gzip.compress(zeros, compresslevel=6), "br": brotli.compress(zeros, quality=4)}


def make_upstream() -> web.Application:
    bombs()  # built before any request, so no fetch's timeout pays for it
    routes = web.RouteTableDef()

    @routes.get("/page")
    async def page(request: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/html", charset="utf-8")

    @routes.get("/report/{n}")
    async def report(request: web.Request) -> web.Response:
        # a long article of n paragraphs, described, with a menu around it
        paragraphs = "".join(
            f"<p>Paragraph {i} of the long report, with commas, numbers and enough words to "
            "count as prose in the main content of the page.</p>"
            for i in range(int(request.match_info["n"]))
        )
        page = (
            '<html><head><meta name="description" content="A long report"></head><body>'
            f"<nav><a href='/'>Home</a></nav><article>{paragraphs}</article></body></html>"
        )
        return web.Response(text=page, content_type="text/html")

    @routes.get("/echo-headers")
    async def echo_headers(request: web.Request) -> web.Response:
        return web.json_response(dict(request.headers))

    @routes.get("/text")
    async def text(request: web.Request) -> web.Response:
        return web.Response(text=request.query.get("body", "plain text"), content_type="text/plain")

    @routes.get("/bytes")
    async def raw_bytes(request: web.Request) -> web.Response:
        # The body as hex digits and the Content-Type as given: any bytes under any label.
        body = bytes.fromhex(request.query["hex"])
        return web.Response(body=body, headers={"Content-Type": request.query["type"]})

    @routes.get("/json")
    async def json_(request: web.Request) -> web.Response:
        return web.Response(body=b'{"b": 1, "a": [1, 2]}', content_type="application/json")

    @routes.get("/sized/{n}")
    async def sized(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * int(request.match_info["n"]), content_type="text/plain")

    @routes.get("/status/{code}")
    async def status(request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="status page")

    @routes.get("/image")
    async def image(request: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + b"\0" * 100, content_type="image/png")

    @routes.get("/gzip")
    async def gzipped(request: web.Request) -> web.Response:
        body = gzip.compress(b"<html><body><p>compressed page</p></body></html>")
        return web.Response(
            body=body, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"}
        )

    @routes.get("/deflate")
    async def deflated(request: web.Request) -> web.Response:
        body = zlib.compress(b"deflated text")
        return web.Response(
            body=body, headers={"Content-Type": "text/plain", "Content-Encoding": "deflate"}
        )

    @routes.get("/br")
    async def br(request: web.Request) -> web.Response:
        body = brotli.compress(b"brotli text")
        return web.Response(
            body=body, headers={"Content-Type": "text/plain", "Content-Encoding": "br"}
        )

    @routes.get("/gzip-bomb")
    async def gzip_bomb(request: web.Request) -> web.Response:
        body = bombs()["gzip"]
        return web.Response(
            body=body, headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"}
        )

    @routes.get("/br-bomb")
    async def br_bomb(request: web.Request) -> web.Response:
        body = bombs()["br"]
        return web.Response(
            body=body, headers={"Content-Type": "text/plain", "Content-Encoding": "br"}
        )

    @routes.get("/stacked")
    async def stacked(request: web.Request) -> web.Response:
        body = gzip.compress(gzip.compress(b"twice"))
        return web.Response(
            body=body, headers={"Content-Type": "text/plain", "Content-Encoding": "gzip, gzip"}
        )

    @routes.get("/unknown-coding")
    async def unknown_coding(request: web.Request) -> web.Response:
        return web.Response(
            body=b"zz", headers={"Content-Type": "text/plain", "Content-Encoding": "zstd"}
        )

    @routes.get("/endless")
    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        chunk = b"y" * 65536
        for _ in range(100_000):
            await response.write(chunk)
        return response

    @routes.get("/slow")
    async def slow(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for _ in range(600):
            await response.write(b"z")
            await asyncio.sleep(0.2)
        return response

    @routes.get("/stall")
    async def stall(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="late")

    @routes.get("/lying-length")
    async def lying_length(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/plain", "Content-Length": "1000"}
        )
        await response.prepare(request)
        await response.write(b"only a little")
        transport = request.transport
        assert transport is not None
        transport.close()
        return response

    @routes.get("/redirect")
    async def redirect(request: web.Request) -> web.Response:
        location = request.query["to"]
        code = int(request.query.get("code", "302"))
        return web.Response(status=code, headers={"Location": location})

    @routes.get("/chain/{n}")
    async def chain(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n == 0:
            return web.Response(text="end of chain", content_type="text/plain")
        return web.Response(status=302, headers={"Location": f"/chain/{n - 1}"})

    @routes.get("/loop")
    async def loop(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "/loop"})

    @routes.get("/two-locations")
    async def two_locations(request: web.Request) -> web.Response:
        response = web.Response(status=302)
        response.headers.add("Location", "/page")
        response.headers.add("Location", "/text")
        return response

    @routes.get("/huge-header")
    async def huge_header(request: web.Request) -> web.Response:
        return web.Response(text="x", headers={"X-Big": "a" * 100_000})

    @routes.get("/many-headers")
    async def many_headers(request: web.Request) -> web.Response:
        return web.Response(text="x", headers={f"X-H{i}": "v" for i in range(500)})

    app = web.Application()
    app.add_routes(routes)
    return app


class ScriptedUpstream:
    """A raw upstream on loopback: each connection reads request heads and answers each with
    the next scripted reply (the last one again with `repeat`), sent in pieces of `drip`
    bytes (0: all at once) with `pause` seconds after each (0 still yields to the loop, so a
    reader in the same loop sees the pieces one read at a time); it closes after a reply
    with `close_after`, or after one whose body only the close can end."""

    def __init__(
        self,
        replies: list[bytes],
        *,
        repeat: bool = False,
        close_after: bool = False,
        drip: int = 0,
        pause: float = 0.001,
    ) -> None:
        self.replies = list(replies)
        self.repeat = repeat
        self.close_after = close_after
        self.drip = drip
        self.pause = pause
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                reply = self.replies[0] if self.repeat else self.replies.pop(0)
                if self.drip:
                    for i in range(0, len(reply), self.drip):
                        writer.write(reply[i : i + self.drip])
                        await writer.drain()
                        await asyncio.sleep(self.pause)
                else:
                    writer.write(reply)
                    await writer.drain()
                framed = b"Content-Length" in reply or b"chunked" in reply or b" 204 " in reply
                if self.close_after or not framed:
                    break  # a close-delimited body ends only when the connection does
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
