"""Fixtures for the search tests: a real aiohttp transport to loopback fakes, a fake clock.

`LoopbackTransport` stands in for the gateway's pinned client: real sockets, no redirects, a
5 MiB cap, timeouts and failures mapped to `ProviderTransportError`; it refuses any host but
127.0.0.1 so no test can ever reach a real provider.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from yarl import URL

from gateway.search.transport import ProviderRequest, ProviderResponse, ProviderTransportError

MAX_BODY = 5 * 1024 * 1024


class LoopbackTransport:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self.calls: list[tuple[ProviderRequest, float, bool]] = []

    async def send(
        self, request: ProviderRequest, *, timeout: float, allow_private: bool
    ) -> ProviderResponse:
        if URL(request.url).host != "127.0.0.1":
            raise AssertionError(f"test transport refuses non-loopback {request.url}")
        self.calls.append((request, timeout, allow_private))
        try:
            async with self._session.request(
                request.method,
                request.url,
                headers=dict(request.headers),
                data=request.body,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                body = await response.content.read(MAX_BODY + 1)
                if len(body) > MAX_BODY:
                    raise ProviderTransportError("network", "response over 5 MiB")
                return ProviderResponse(response.status, response.headers, body)
        except TimeoutError:
            raise ProviderTransportError("timeout", f"no answer within {timeout:g} s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderTransportError("network", type(exc).__name__) from None


@dataclass
class Reply:
    status: int = 200
    body: Any = b""  # bytes, str, or a JSON value
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, "text/html; charset=utf-8"
        if isinstance(self.body, str):
            return self.body.encode(), "text/html; charset=utf-8"
        return orjson.dumps(self.body), "application/json"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class FakeUpstream:
    """Replays queued replies in order, then `default`; records every request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.default = Reply(500, {"error": "no reply queued"})
        self.requests: list[Recorded] = []
        self.base_url = ""

    def queue(self, *replies: Reply) -> FakeUpstream:
        self.replies.extend(replies)
        return self

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            Recorded(
                request.method,
                request.path,
                dict(request.query),
                dict(request.headers),
                await request.read(),
            )
        )
        reply = self.replies.pop(0) if self.replies else self.default
        if reply.delay:
            await asyncio.sleep(reply.delay)
        body, content_type = reply.encoded()
        headers = {"Content-Type": content_type, **reply.headers}
        return web.Response(status=reply.status, body=body, headers=headers)


class FakeClock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
async def transport() -> AsyncIterator[LoopbackTransport]:
    async with aiohttp.ClientSession() as session:
        yield LoopbackTransport(session)


@pytest.fixture
def upstream(aiohttp_server: Any) -> Callable[[], Awaitable[FakeUpstream]]:
    async def start() -> FakeUpstream:
        fake = FakeUpstream()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", fake.handle)
        server = await aiohttp_server(app, host="127.0.0.1")
        fake.base_url = str(server.make_url("")).rstrip("/")
        return fake

    return start


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
