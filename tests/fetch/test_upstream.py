"""The proxy's upstream client against scripted loopback upstreams: framing, keep-alive reuse,
back-pressure, and hostile responses (smuggling shapes, huge heads, early close, slow drip)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import (
    PolicyDeniedError,
    ResponseTooLargeError,
    UpstreamError,
    UpstreamUnreachableError,
)
from gateway.fetch.resolver import parse_static_hosts
from gateway.fetch.upstream import UpstreamPool, request_head
from gateway.policy.model import Timeouts
from gateway.policy.urls import parse_url
from gateway.wire.http1 import BadResponseError
from tests.policy.conftest import make_policy
from tests.upstream import ScriptedUpstream as Script

HOSTS = parse_static_hosts({"site.example.com": ["127.0.0.1"], "lan.example.com": ["10.0.0.5"]})


class Sink:
    def __init__(self, pause_every: int = 0) -> None:
        self.data = bytearray()
        self.write_paused = False
        self.pause_every = pause_every
        self.pauses = 0

    def write(self, data: bytes) -> None:
        self.data += data
        if self.pause_every and len(self.data) // self.pause_every > self.pauses:
            self.write_paused = True

    async def drain(self) -> None:
        if self.write_paused:
            self.pauses += 1
            await asyncio.sleep(0.001)
            self.write_paused = False


@pytest.fixture
async def make_env():
    made: list[tuple[Script, UpstreamPool]] = []

    async def make(replies: list[bytes], **kwargs):
        script = Script(list(replies), **kwargs)
        port = await script.start()
        pool = UpstreamPool(static_hosts=lambda: HOSTS, own_addresses=lambda: ())
        policy = make_policy(
            allow=[".example.com"],
            ports=(80, port),
            net_allow=["127.0.0.0/8"],
            timeouts=Timeouts(connect=2, read=1, total=2.5),
        )
        made.append((script, pool))
        return script, pool, policy, port

    yield make
    for script, pool in made:
        pool.close()
        await script.close()


def target(port: int, host: str = "site.example.com", path: str = "/page"):
    return parse_url(f"http://{host}:{port}{path}")


async def fetch(pool, policy, port, *, method="GET", rechunk=False, sink=None):
    t = target(port)
    conn = await pool.exchange(policy, t, method, request_head(method, t, [], None))
    sink = sink or Sink()
    try:
        await conn.pipe(sink, b"HEAD|", None, rechunk)
    finally:
        conn.release()
    return conn, bytes(sink.data)


BODY = b"x" * 50_000

GOOD = [
    (
        "content-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 50000\r\n\r\n" + BODY,
        False,
        b"HEAD|" + BODY,
        True,
    ),
    (
        "chunked-to-chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n",
        True,
        b"HEAD|3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        True,
    ),
    (
        "chunked-decoded",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        False,
        b"HEAD|abcde",
        True,
    ),
    (
        "until-close-rechunked",
        b"HTTP/1.1 200 OK\r\n\r\nhello",
        True,
        b"HEAD|5\r\nhello\r\n0\r\n\r\n",
        False,
    ),
    ("until-close-raw", b"HTTP/1.0 200 OK\r\n\r\nhello", False, b"HEAD|hello", False),
    (
        "connection-close",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        False,
        b"HEAD|ok",
        False,
    ),
    (
        "extra-after-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n\r\n",
        False,
        b"HEAD|ok",
        False,
    ),
    (
        "interim-100",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        False,
        b"HEAD|ok",
        True,
    ),
    ("no-content", b"HTTP/1.1 204 No Content\r\n\r\n", True, b"HEAD|", True),
]


@pytest.mark.parametrize(
    ("reply", "rechunk", "expected", "reused"), [c[1:] for c in GOOD], ids=[c[0] for c in GOOD]
)
@pytest.mark.parametrize("drip", [0, 1], ids=["whole", "slow-drip"])
async def test_bodies_framed_and_reused_only_when_clean(
    make_env, reply, rechunk, expected, reused, drip
):
    if drip and len(reply) > 1000:
        pytest.skip("a byte-by-byte drip of the big body would only be slow")
    if drip and b"okHTTP" in reply:
        pytest.skip("dripped extra bytes land after the exchange; nothing to tell apart")
    if drip and rechunk and b"\r\n\r\nhello" in reply:  # each byte read is one chunk
        expected = b"HEAD|" + b"".join(b"1\r\n%c\r\n" % c for c in b"hello") + b"0\r\n\r\n"
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nend"
    script, pool, policy, port = await make_env([reply, ok], drip=drip)
    conn, data = await fetch(pool, policy, port, rechunk=rechunk)
    assert data == expected
    assert conn.ip == "127.0.0.1"
    assert pool.idle_count() == (1 if reused else 0)
    _, second = await fetch(pool, policy, port)
    assert second == b"HEAD|end"
    assert script.connections == (1 if reused else 2)


CAPPED = [
    # (id, reply, rechunk, what the sink gets before the cut)
    ("length-over", b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", False, b""),
    ("until-close-raw", b"HTTP/1.0 200 OK\r\n\r\nhello world", False, b"HEAD|hello"),
    (
        "until-close-rechunked",
        b"HTTP/1.1 200 OK\r\n\r\nhello world",
        True,
        b"HEAD|5\r\nhello\r\n",
    ),
    (
        "chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n",
        False,
        b"HEAD|",
    ),
]


@pytest.mark.parametrize(
    ("reply", "rechunk", "expected"), [c[1:] for c in CAPPED], ids=[c[0] for c in CAPPED]
)
async def test_a_capped_pipe_relays_no_more_than_its_limit(make_env, reply, rechunk, expected):
    script, pool, policy, port = await make_env([reply])
    t = target(port)
    conn = await pool.exchange(policy, t, "GET", request_head("GET", t, [], None))
    sink = Sink()
    try:
        with pytest.raises(ResponseTooLargeError):
            await conn.pipe(sink, b"HEAD|", None, rechunk, 5)
    finally:
        conn.release()
    assert bytes(sink.data) == expected
    assert pool.idle_count() == 0  # a cut connection is never reused


async def test_a_body_within_the_cap_is_whole(make_env):
    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    script, pool, policy, port = await make_env([reply])
    t = target(port)
    conn = await pool.exchange(policy, t, "GET", request_head("GET", t, [], None))
    sink = Sink()
    try:
        await conn.pipe(sink, b"HEAD|", None, False, 3)
    finally:
        conn.release()
    assert bytes(sink.data) == b"HEAD|abc"


async def test_head_request_has_no_body_and_keeps_the_connection(make_env):
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 9999\r\n\r\n"
    script, pool, policy, port = await make_env([reply, reply])
    conn, data = await fetch(pool, policy, port, method="HEAD")
    assert conn.head is not None and conn.head.status == 200
    assert data == b"HEAD|"
    await fetch(pool, policy, port, method="HEAD")
    assert script.connections == 1


async def test_request_head_is_origin_form_with_host(make_env):
    script, pool, policy, port = await make_env([b"HTTP/1.1 204 No Content\r\n\r\n"])
    t = parse_url(f"http://site.example.com:{port}/a/b?q=1")
    data = request_head("POST", t, [("X-A", "1")], 3) + b"abc"
    conn = await pool.exchange(policy, t, "POST", data)
    conn.release()
    assert (
        script.requests[0]
        == (
            f"POST /a/b?q=1 HTTP/1.1\r\nHost: site.example.com:{port}\r\nX-A: 1\r\n"
            "Content-Length: 3\r\n\r\n"
        ).encode()
    )


async def test_a_kept_connection_the_upstream_closed_is_replaced(make_env):
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    script, pool, policy, port = await make_env([ok, ok], close_after=True)
    await fetch(pool, policy, port)
    await asyncio.sleep(0.05)  # the upstream's FIN arrives while the connection is idle
    _, data = await fetch(pool, policy, port)
    assert data == b"HEAD|ok"
    assert script.connections == 2


async def test_slow_client_pauses_the_upstream_and_still_gets_everything(make_env):
    big = b"y" * 2_000_000
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(big), big)
    _, pool, policy, port = await make_env([reply])
    sink = Sink(pause_every=100_000)
    _, data = await fetch(pool, policy, port, sink=sink)
    assert data == b"HEAD|" + big
    assert sink.pauses >= 5


async def test_addresses_are_checked_before_connecting(make_env):
    _, pool, policy, port = await make_env([])
    t = target(port, host="lan.example.com")
    with pytest.raises(PolicyDeniedError):
        await pool.exchange(policy, t, "GET", request_head("GET", t, [], None))


HEAD_REFUSED = [
    ("cl-and-te", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
    ("two-cl", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"),
    ("cl-plus", b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok"),
    ("cl-list", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok"),
    ("te-gzip", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
    ("te-chunked-twice", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"),
    ("obs-fold", b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n"),
    ("space-before-colon", b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n"),
    ("bare-lf", b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n"),
    ("nul-in-value", b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n"),
    ("http09-status", b"HTTP/0.9 200 OK\r\n\r\n"),
    ("status-two-digits", b"HTTP/1.1 20 OK\r\n\r\n"),
    ("not-http", b"SSH-2.0-OpenSSH\r\n\r\n"),
    ("switching-protocols", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"),
    ("huge-field", b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 17_000 + b"\r\n\r\n"),
    ("too-many-headers", b"HTTP/1.1 200 OK\r\n" + b"X-H: v\r\n" * 129 + b"\r\n"),
    ("endless-head", b"HTTP/1.1 200 OK\r\n" + b"X-H: vvvvvvvvvvvvvvvvvvvvvvvv\r\n" * 3000),
]


@pytest.mark.parametrize("reply", [c[1] for c in HEAD_REFUSED], ids=[c[0] for c in HEAD_REFUSED])
async def test_hostile_heads_are_refused(make_env, reply):
    _, pool, policy, port = await make_env([reply])
    with pytest.raises(BadResponseError):
        await fetch(pool, policy, port)
    assert pool.idle_count() == 0


BODY_BROKEN = [
    (
        "bad-chunk-size",
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
        BadResponseError,
    ),
    (
        "chunk-size-overflow",
        b"Transfer-Encoding: chunked\r\n\r\n" + b"f" * 16 + b"\r\n",
        BadResponseError,
    ),
    (
        "chunk-size-space",
        b"Transfer-Encoding: chunked\r\n\r\n2 \r\nab\r\n0\r\n\r\n",
        BadResponseError,
    ),
    (
        "chunk-without-crlf",
        b"Transfer-Encoding: chunked\r\n\r\n2\r\nabXX0\r\n\r\n",
        BadResponseError,
    ),
    ("chunk-bare-lf", b"Transfer-Encoding: chunked\r\n\r\n2\nab\r\n0\r\n\r\n", BadResponseError),
    ("endless-chunk-line", b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 2000, BadResponseError),
    ("bad-trailer", b"Transfer-Encoding: chunked\r\n\r\n0\r\nno colon\r\n\r\n", BadResponseError),
    ("short-length", b"Content-Length: 10\r\n\r\nabc", UpstreamError),
    ("chunk-cut", b"Transfer-Encoding: chunked\r\n\r\na\r\nabc", UpstreamError),
]


@pytest.mark.parametrize(
    ("rest", "error"), [c[1:] for c in BODY_BROKEN], ids=[c[0] for c in BODY_BROKEN]
)
async def test_broken_bodies_end_the_exchange(make_env, rest, error):
    _, pool, policy, port = await make_env([b"HTTP/1.1 200 OK\r\n" + rest], close_after=True)
    with pytest.raises(error):
        await fetch(pool, policy, port, rechunk=True)
    assert pool.idle_count() == 0


@pytest.mark.parametrize(
    "reply", [b"", b"HTTP/1.1 200 OK\r\nContent-"], ids=["nothing", "half-head"]
)
async def test_close_before_the_head_is_unreachable(make_env, reply):
    _, pool, policy, port = await make_env([reply], close_after=True)
    with pytest.raises(UpstreamUnreachableError):
        await fetch(pool, policy, port)
