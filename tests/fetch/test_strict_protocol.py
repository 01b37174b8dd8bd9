"""The Fetcher's aiohttp protocol behind the strict reader: refusals carry the reader's
reason, HEAD responses are framed by the request, clean connections are still reused."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamError
from gateway.fetch.client import Fetcher, FetchOptions
from gateway.fetch.resolver import parse_static_hosts
from gateway.policy.engine import decide_url
from tests.wire.test_http1 import fetch_policy, response, scripted


async def fetch_twice(reply: bytes, method: str = "GET") -> tuple[list[bytes], int]:
    upstream = scripted(reply, byte_by_byte=False)
    port = await upstream.start()
    fetcher = Fetcher(static_hosts=parse_static_hosts({"site.example.com": ["127.0.0.1"]}))
    policy = fetch_policy(port)
    try:
        _, target = decide_url(policy, f"http://site.example.com:{port}/")
        assert target is not None
        options = FetchOptions(method=method)
        bodies = [(await fetcher.fetch(policy, target, options)).body for _ in range(2)]
        return bodies, upstream.connections
    finally:
        await fetcher.close()
        await upstream.close()


async def test_a_refused_response_fails_with_the_readers_reason() -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: a\r\n folded\r\n\r\nok"
    with pytest.raises(UpstreamError, match="obs-fold"):
        await fetch_twice(reply)


async def test_a_head_response_has_no_body_whatever_its_length_says() -> None:
    bodies, connections = await fetch_twice(response(b"Content-Length: 100"), method="HEAD")
    assert bodies == [b"", b""]
    assert connections == 1  # nothing was taken for a body: the connection stayed clean


async def test_a_clean_connection_is_reused() -> None:
    bodies, connections = await fetch_twice(response(b"Content-Length: 2", body=b"ok"))
    assert bodies == [b"ok", b"ok"] and connections == 1
