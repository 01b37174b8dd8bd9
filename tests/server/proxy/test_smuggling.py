"""Requests the proxy's reader must refuse (smuggling shapes, Host tricks, bad framing): each
gets 400 with X-Gateway-Reason: bad_request, an audit record, and nothing reaches upstream."""

from __future__ import annotations

import asyncio

import pytest

from tests.server.proxy.env import parse_head, raw_exchange, start_env


@pytest.fixture
async def env(tmp_path, make_config):
    environment = await start_env(tmp_path, make_config)
    yield environment
    await environment.close()


def request(env, head: str, body: bytes = b"") -> bytes:
    return (
        head.format(
            url=env.url("/echo"),
            host=f"site.example.com:{env.upstream_port}",
            port=env.upstream_port,
        ).encode(
            "latin-1"
        )
        + body
    )


CASES = [
    (
        "cl-and-te",
        "POST {url} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 4\r\n"
        "Transfer-Encoding: chunked\r\n\r\n",
        b"0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
    ),
    ("two-cl", "POST {url} HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", b"abcd"),
    ("cl-not-decimal", "POST {url} HTTP/1.1\r\nContent-Length: +4\r\n\r\n", b"abcd"),
    ("cl-hex", "POST {url} HTTP/1.1\r\nContent-Length: 0x4\r\n\r\n", b"abcd"),
    ("te-gzip-chunked", "POST {url} HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", b""),
    ("te-identity", "POST {url} HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", b""),
    ("te-in-http10", "POST {url} HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", b"0\r\n\r\n"),
    ("get-with-body", "GET {url} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\n\r\n", b"hello"),
    ("head-chunked", "HEAD {url} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"0\r\n\r\n"),
    ("obs-fold", "GET {url} HTTP/1.1\r\nHost: {host}\r\nX-A: 1\r\n folded\r\n\r\n", b""),
    ("space-before-colon", "GET {url} HTTP/1.1\r\nHost : {host}\r\n\r\n", b""),
    ("bare-lf", "GET {url} HTTP/1.1\nHost: {host}\r\n\r\n", b""),
    ("bare-cr-in-value", "GET {url} HTTP/1.1\r\nX-A: a\rb\r\n\r\n", b""),
    ("nul-in-value", "GET {url} HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", b""),
    ("http2-version", "GET {url} HTTP/2.0\r\n\r\n", b""),
    ("http09", "GET {url}\r\n\r\n", b""),
    ("two-spaces", "GET  {url} HTTP/1.1\r\n\r\n", b""),
    ("host-mismatch", "GET {url} HTTP/1.1\r\nHost: denied.example.org\r\n\r\n", b""),
    ("host-other-port", "GET {url} HTTP/1.1\r\nHost: site.example.com:1\r\n\r\n", b""),
    ("two-hosts", "GET {url} HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n", b""),
    ("origin-form", "GET /echo HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n", b""),
    ("asterisk-form", "OPTIONS * HTTP/1.1\r\nConnection: close\r\n\r\n", b""),
    # https goes through CONNECT: absolute-form would send it in clear text to port 443
    (
        "absolute-https",
        "GET https://site.example.com:{port}/echo HTTP/1.1\r\nHost: site.example.com\r\n\r\n",
        b"",
    ),
    (
        "bad-chunk-size",
        "POST {url} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"zz\r\nab\r\n0\r\n\r\n",
    ),
    (
        "chunk-without-crlf",
        "POST {url} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"2\r\nabXX0\r\n\r\n",
    ),
    (
        "chunk-size-space",
        "POST {url} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"2 \r\nab\r\n0\r\n\r\n",
    ),
    ("long-line", "GET {url}?" + "a" * 9000 + " HTTP/1.1\r\n\r\n", b""),
    ("long-header", "GET {url} HTTP/1.1\r\nX-Big: " + "b" * 9000 + "\r\n\r\n", b""),
    ("huge-head", "GET {url} HTTP/1.1\r\n" + "X-H: v\r\n" * 5000, b""),
    (
        "connect-with-body",
        "CONNECT site.example.com:443 HTTP/1.1\r\nContent-Length: 3\r\n\r\n",
        b"abc",
    ),
    ("connect-path", "CONNECT site.example.com:443/x HTTP/1.1\r\n\r\n", b""),
    ("connect-no-port", "CONNECT site.example.com HTTP/1.1\r\n\r\n", b""),
    ("connect-userinfo", "CONNECT a@site.example.com:443 HTTP/1.1\r\n\r\n", b""),
]


@pytest.mark.parametrize(("head", "body"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_ambiguous_requests_are_refused(env, head, body) -> None:
    raw = await raw_exchange(env.port, request(env, head, body))
    status, headers, text = parse_head(raw)
    assert status == 400, raw[:300]
    assert headers["x-gateway-reason"] == "bad_request"
    assert headers["x-gateway-request-id"]
    assert raw.count(b"\nHTTP/1.") == 0  # nothing smuggled behind it was answered
    assert b'"method"' not in raw  # the upstream's echo never came back
    records = env.records("proxy_http") + env.records("proxy_connect")
    assert len(records) == 1
    assert records[0]["error"]["code"] == "bad_request"
    assert records[0]["event"]["outcome"] == "failure"


async def test_header_timeout_answers_and_records_a_slow_head(tmp_path, make_config) -> None:
    from gateway.config import ServerConfig

    env = await start_env(tmp_path, make_config, server=ServerConfig(header_timeout=0.3))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", env.port)
        writer.write(b"GET http://site.example.com/ HTT")
        # The proxy answers and closes: an end of stream well within the bound (raw_exchange
        # would return on its own read timeout too, so it cannot tell the two apart).
        raw = await asyncio.wait_for(reader.read(), 3)
        writer.close()
        status, headers, _ = parse_head(raw)
        assert status == 408 and headers["x-gateway-reason"] == "bad_request"
        [record] = env.records("proxy_http")
        assert record["error"]["code"] == "bad_request"
        assert record["http"]["response"]["status_code"] == 408
    finally:
        await env.close()


async def test_garbage_bytes_never_crash_the_listener(env) -> None:
    for blob in (b"\x16\x03\x01\x00\x05hello", b"\xff" * 100 + b"\r\n\r\n", b"\r\n\r\n\r\n"):
        await raw_exchange(env.port, blob, read_timeout=1)
    ok = await raw_exchange(
        env.port,
        request(env, "GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
    )
    assert parse_head(ok)[0] == 200
