"""The forward proxy, absolute-form http://: real clients (curl -x, aiohttp proxy=) against a
loopback upstream, with the audit file checked for every decision."""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import time

import aiohttp
import orjson
import pytest

from gateway.config import ClientLimits, ProxyConfig, ServerConfig
from tests.server.proxy.env import BIG, curl, parse_head, raw_exchange, start_env


@pytest.fixture
async def env(tmp_path, make_config):
    environment = await start_env(tmp_path, make_config)
    yield environment
    await environment.close()


async def test_allowed_get_is_forwarded_and_audited(env) -> None:
    result = await curl("-x", env.proxy_url, env.url("/page"))
    assert result.status == 200 and result.body == b"hello through the proxy"
    [record] = env.records("proxy_http")
    assert record["event"]["outcome"] == "success" and record["event"]["type"] == ["allowed"]
    assert record["policy"]["decision"] == "allow"
    assert record["policy"]["rule"] == "domains.allow[0]"
    assert record["policy"]["sha256"] == env.services.state.default_policy.sha256
    assert record["destination"] == {
        "domain": "site.example.com",
        "ip": "127.0.0.1",
        "port": env.upstream_port,
    }
    assert record["http"] == {
        "request": {"method": "GET"},
        "response": {"status_code": 200, "bytes": len(b"hello through the proxy")},
    }


@pytest.mark.parametrize(
    ("host", "path", "args", "reason", "rule"),
    [
        ("denied.example.org", "/page", (), "domain_not_allowed", "default"),
        ("blocked.example.com", "/page", (), "domain_denied", "domains.deny[0]"),
        ("internal.example.com", "/page", (), "private_address", "networks.block_private"),
        ("metadata.example.com", "/page", (), "metadata_address", "networks.metadata"),
        ("mixed.example.com", "/page", (), "private_address", "networks.block_private"),
        ("site.example.com", "/echo", ("-X", "DELETE"), "method_not_allowed", "methods"),
    ],
    ids=["unlisted", "deny-rule", "private", "metadata", "mixed-answer", "method"],
)
async def test_refusals_are_403_with_reason_rule_and_one_line(
    env, host, path, args, reason, rule
) -> None:
    result = await curl("-x", env.proxy_url, *args, env.url(path, host))
    assert result.status == 403
    assert result.headers["x-gateway-reason"] == reason
    assert result.headers["x-gateway-rule"] == rule
    assert result.body.count(b"\n") == 1 and result.body.startswith(b"refused by the gateway")
    [record] = env.records("proxy_http")
    assert record["event"]["type"] == ["denied"] and record["event"]["outcome"] == "failure"
    assert record["policy"]["reason"] == reason and record["policy"]["rule"] == rule


async def test_deny_rule_message_reaches_the_agent(env) -> None:
    result = await curl("-x", env.proxy_url, env.url("/page", "blocked.example.com"))
    assert b"this site is closed to agents" in result.body


async def test_a_port_outside_the_policy_is_refused_before_connecting(env) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    result = await curl("-x", env.proxy_url, f"http://site.example.com:{closed_port}/")
    # the port is not in the policy: refused before any connection
    assert result.status == 403 and result.headers["x-gateway-reason"] == "port_not_allowed"


async def test_upstream_refusing_connections_is_502(env) -> None:
    await env.runners[0].cleanup()  # the plain upstream goes away; its port stays allowed
    result = await curl("-x", env.proxy_url, env.url("/page"))
    assert result.status == 502
    assert result.headers["x-gateway-reason"] == "upstream_unreachable"
    [record] = env.records("proxy_http")
    assert record["error"]["code"] == "upstream_unreachable"


async def test_upstream_gateway_headers_are_removed(env) -> None:
    result = await curl("-x", env.proxy_url, env.url("/forge"))
    assert result.status == 200 and result.body == b"forged"
    assert not any(name.startswith("x-gateway") for name in result.headers)


async def test_redirects_are_returned_not_followed(env) -> None:
    result = await curl("-x", env.proxy_url, env.url("/redirect"))
    assert result.status == 302
    assert result.headers["location"] == "http://blocked.example.com/"


async def test_chunked_upstream_is_rechunked(env) -> None:
    result = await curl("-x", env.proxy_url, env.url("/chunked"))
    assert result.status == 200 and result.body == b"part0;part1;part2;part3;part4;"
    assert result.headers["transfer-encoding"] == "chunked"


async def test_no_content_type_or_size_limit_for_proxied_traffic(env) -> None:
    image = await curl("-x", env.proxy_url, env.url("/image"))
    assert image.status == 200 and image.body.startswith(b"\x89PNG")
    big = await curl("-x", env.proxy_url, env.url("/big"))
    assert big.status == 200 and len(big.body) == BIG


async def test_hop_by_hop_and_proxy_headers_are_not_forwarded(env) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            env.url("/echo?q=1"),
            proxy=env.proxy_url,
            headers={
                "Proxy-Authorization": "Basic c2VjcmV0OnNlY3JldA==",
                "Proxy-Foo": "x",
                "Connection": "keep-alive, X-Drop-Me",
                "X-Drop-Me": "1",
                "Keep-Alive": "timeout=5",
                "X-Kept": "yes",
            },
        ) as response,
    ):
        assert response.status == 200
        echoed = await response.json()
    names = {name.lower() for name, _ in echoed["headers"]}
    assert "x-kept" in names
    assert not names & {"proxy-authorization", "proxy-foo", "x-drop-me", "keep-alive"}
    assert echoed["path"] == "/echo?q=1"
    assert dict((k.lower(), v) for k, v in echoed["headers"])["host"] == (
        f"site.example.com:{env.upstream_port}"
    )


async def test_post_body_is_forwarded(env) -> None:
    result = await curl("-x", env.proxy_url, "--data-binary", "a=1&b=2", env.url("/echo"))
    assert result.status == 200
    echoed = orjson.loads(result.body)
    assert echoed["body"] == "a=1&b=2" and echoed["method"] == "POST"


async def test_keep_alive_carries_several_requests(env) -> None:
    request = (
        f"GET {env.url('/page')} HTTP/1.1\r\nHost: site.example.com:{env.upstream_port}\r\n\r\n"
    ).encode()
    closing = request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    raw = await raw_exchange(env.port, request + request + closing)
    assert raw.count(b"HTTP/1.1 200") == 3
    assert raw.count(b"hello through the proxy") == 3
    assert len(env.records("proxy_http")) == 3


async def test_aiohttp_client_through_the_proxy(env) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            async with session.get(env.url("/page"), proxy=env.proxy_url) as response:
                assert response.status == 200
                assert await response.text() == "hello through the proxy"


async def test_connections_per_ip_are_capped(tmp_path, make_config) -> None:
    env = await start_env(tmp_path, make_config, server=ServerConfig(max_connections_per_ip=1))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", env.port)
        for _ in range(3):
            refused = await raw_exchange(env.port, b"", read_timeout=2)
            status, headers, body = parse_head(refused)
            assert status == 503 and headers["x-gateway-reason"] == "unavailable"
            assert headers["retry-after"] == "1" and headers["connection"] == "close"
            assert b"server.max_connections_per_ip" in body
        # Each refusal is on record, with the address it came from: no client
        # is known before a request head.
        records = env.records("proxy_http")
        assert len(records) == 3
        for record in records:
            assert record["event"]["outcome"] == "failure"
            assert record["event"]["type"] == ["error"]
            assert record["error"]["code"] == "unavailable"
            assert "server.max_connections_per_ip" in record["error"]["message"]
            assert record["source"]["ip"] == "127.0.0.1"
            assert record["client"]["id"] is None
            assert record["http"]["response"]["status_code"] == 503
        assert len({r["event"]["id"] for r in records}) == 3
        writer.close()
    finally:
        await env.close()


async def test_rate_limit_is_429_with_retry_after(tmp_path, make_config) -> None:
    env = await start_env(
        tmp_path,
        make_config,
        clients=(("agent", "tok-1", ClientLimits(requests_per_minute=2)),),
    )
    try:
        statuses = []
        for _ in range(3):
            result = await curl("-x", env.proxy_url, "-U", "agent:tok-1", env.url("/page"))
            statuses.append(result.status)
        assert statuses == [200, 200, 429]
        assert result.headers["x-gateway-reason"] == "rate_limited"
        assert 1 <= int(result.headers["retry-after"]) <= 60
        assert env.records("proxy_http")[-1]["error"]["code"] == "rate_limited"
    finally:
        await env.close()


def get_request(env, path: str = "/page", extra: str = "") -> bytes:
    host = f"site.example.com:{env.upstream_port}"
    return f"GET {env.url(path)} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def post_request(env, body: bytes, length: int) -> bytes:
    host = f"site.example.com:{env.upstream_port}"
    head = f"POST {env.url('/echo')} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {length}\r\n\r\n"
    return head.encode() + body


async def wait_for_records(env, action: str, count: int = 1) -> list[dict]:
    """The records of `action`, once there are `count` (a client that left is not told
    when its record is written)."""
    for _ in range(100):
        records = env.records(action)
        if len(records) >= count:
            return records
        await asyncio.sleep(0.05)
    return env.records(action)


def assert_abandoned(record: dict, why: str) -> None:
    """A request the policy allowed, ended without an answer: the allow decision, an error
    naming how it ended, no response status."""
    assert record["event"]["outcome"] == "failure" and record["event"]["type"] == ["error"]
    assert record["policy"]["decision"] == "allow"
    assert record["policy"]["rule"] == "domains.allow[0]"
    assert record["error"]["code"] == why and record["error"]["reason"] == why
    assert record["destination"]["domain"] == "site.example.com"
    assert "response" not in record.get("http", {})
    assert record["source"]["ip"] == "127.0.0.1"


@pytest.mark.parametrize(
    ("sent", "answered"),
    [
        ("get", b"hello through the proxy"),
        ("whole-body", b'"body": "a=1&b=2"'),
        ("part-of-body", None),
    ],
    ids=["get", "post-whole-body", "post-part-of-body"],
)
async def test_a_half_closed_client_gets_its_answer_if_its_request_was_whole(
    env, sent, answered
) -> None:
    request = {
        "get": get_request(env),
        "whole-body": post_request(env, b"a=1&b=2", 7),
        "part-of-body": post_request(env, b"a=1", 7),
    }[sent]
    reader, writer = await asyncio.open_connection("127.0.0.1", env.port)
    writer.write(request)
    writer.write_eof()  # nothing more to send: the answer must still come, then the close
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    if answered is None:
        assert raw == b""  # the body can never be whole: nothing went upstream
        # ... but the policy had allowed the request: that decision is on record, with how
        # the request ended (a record for every proxied request).
        [record] = await wait_for_records(env, "proxy_http")
        assert_abandoned(record, "client_closed")
        return
    status, _, body = parse_head(raw)
    assert status == 200 and answered in body
    assert len(env.records("proxy_http")) == 1


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST rather than a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@pytest.mark.parametrize(
    ("path", "body", "ending", "why"),
    [
        ("/echo", b"a=1", "close", "client_closed"),
        ("/echo", b"a=1", "reset", "client_error"),
        ("/stall-head?for=2", None, "reset", "client_error"),
        ("/stall-head?for=2", None, "shutdown", "shutdown"),
    ],
    ids=[
        "closed-mid-body",
        "reset-mid-body",
        "reset-waiting-for-the-upstream",
        "shutdown-waiting-for-the-upstream",
    ],
)
async def test_a_client_that_leaves_before_its_answer_leaves_a_record(
    env, path, body, ending, why
) -> None:
    """The policy allowed the request, then the client went away (mid-body, or while the
    upstream had not answered yet) or the shutdown grace ended: one record with the allow
    decision and how it ended."""
    request = post_request(env, body, 7) if body is not None else get_request(env, path)
    reader, writer = await asyncio.open_connection("127.0.0.1", env.port)
    writer.write(request)
    await writer.drain()
    await asyncio.sleep(0.3)  # the request is decided and waits for its body or upstream
    if ending == "reset":
        reset(writer)
    elif ending == "shutdown":
        await env.proxy.close(grace=0)
    else:
        writer.close()
    [record] = await wait_for_records(env, "proxy_http")
    assert_abandoned(record, why)
    await asyncio.sleep(0.2)
    assert len(env.records("proxy_http")) == 1  # once, not again when the task ends
    writer.close()


async def test_requests_sent_ahead_are_served_in_order_within_a_bound(env) -> None:
    # Over 32 KB of pipelined heads arrive while the first is served: reading pauses at the
    # bound and resumes after each answer, and every request is answered once, in order.
    pad = "X-Pad: " + "p" * 1000 + "\r\n"
    requests = [get_request(env, f"/echo?n={n}", pad) for n in range(40)]
    requests.append(get_request(env, "/echo?n=last", "Connection: close\r\n"))
    raw = await raw_exchange(env.port, b"".join(requests), read_timeout=20)
    assert raw.count(b"HTTP/1.1 200") == 41
    order = [int(n) for n in re.findall(rb'"/echo\?n=([0-9]+)"', raw)]
    assert order == list(range(40)) and raw.index(b'"/echo?n=last"') > raw.index(b'n=39"')
    assert len(env.records("proxy_http")) == 41


async def test_idle_keep_alive_closes_after_keepalive_timeout_but_busy_does_not(
    tmp_path, make_config
) -> None:
    env = await start_env(
        tmp_path, make_config, server=ServerConfig(keepalive_timeout=0.6, header_timeout=0.6)
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", env.port)
        started = time.monotonic()
        while time.monotonic() - started < 1.5:  # in use for longer than the timeout
            writer.write(get_request(env))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            await reader.readexactly(len(b"hello through the proxy"))
            await asyncio.sleep(0.2)
        idle_from = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # then idle: closed
        assert 0.3 < time.monotonic() - idle_from < 3
        writer.close()
    finally:
        await env.close()


@pytest.mark.parametrize(
    ("sent", "upstream_sees"),
    [
        (
            "Cookie: a=1\r\ncookie: b=2\r\n",
            {"cookie": "a=1; b=2", "accept-encoding": "identity"},
        ),
        ("X-A: 1\r\nx-a: 2\r\n", {"x-a": "1, 2", "accept-encoding": "identity"}),
        ("Accept-Encoding: gzip\r\n", {"accept-encoding": "gzip"}),
        (
            "Accept-Encoding: gzip\r\nConnection: Accept-Encoding\r\n",
            {"accept-encoding": "identity"},
        ),
    ],
    ids=["cookies-joined-with-semicolon", "any-case-joined", "coding-kept", "coding-hop-by-hop"],
)
async def test_repeated_headers_are_joined_and_no_coding_is_added(env, sent, upstream_sees) -> None:
    raw = await raw_exchange(env.port, get_request(env, "/echo", sent + "Connection: close\r\n"))
    status, _, body = parse_head(raw)
    assert status == 200
    echoed = {}
    for name, value in orjson.loads(body)["headers"]:
        echoed.setdefault(name.lower(), []).append(value)
    for name, value in upstream_sees.items():
        assert echoed[name] == [value], echoed


@pytest.mark.parametrize(
    ("path", "outcome"),
    [
        ("/stall-head?for=3", "504"),
        ("/trickle?pieces=2&every=0.05&stall=3", "cut"),
        ("/trickle?pieces=6&every=0.2", "complete"),  # busy longer than the idle timeout
    ],
    ids=["no-head", "body-stops", "slow-but-steady"],
)
async def test_an_upstream_that_stops_sending_is_timed_out(
    tmp_path, make_config, path, outcome
) -> None:
    env = await start_env(tmp_path, make_config, proxy=ProxyConfig(tunnel_idle_timeout=0.5))
    try:
        started = time.monotonic()
        raw = await raw_exchange(
            env.port, get_request(env, path, "Connection: close\r\n"), read_timeout=10
        )
        took = time.monotonic() - started
        status, headers, body = parse_head(raw)
        if outcome == "504":
            assert status == 504 and headers["x-gateway-reason"] == "upstream_timeout"
            [record] = env.records("proxy_http")
            assert record["error"]["code"] == "upstream_timeout"
            assert 0.4 < took < 3
        elif outcome == "cut":
            assert status == 200 and len(body) == 200  # the head, then an abort mid-body
            assert 0.4 < took < 3
        else:
            assert status == 200 and body == b"t" * 1000
    finally:
        await env.close()


async def test_one_connection_times_out_only_the_request_that_stalls(tmp_path, make_config) -> None:
    env = await start_env(tmp_path, make_config, proxy=ProxyConfig(tunnel_idle_timeout=0.5))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", env.port)

        async def answer(path: str) -> tuple[int, bytes]:
            writer.write(get_request(env, path))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            status, headers, _ = parse_head(head)
            return status, await reader.readexactly(int(headers["content-length"]))

        assert await answer("/page") == (200, b"hello through the proxy")
        await asyncio.sleep(0.8)  # idle past the timeout between requests: nothing to cut
        assert await answer("/trickle?pieces=6&every=0.2") == (200, b"t" * 1000)
        status, body = await answer("/stall-head?for=2")
        assert status == 504 and b"proxy.tunnel_idle_timeout" in body
        assert await answer("/page") == (200, b"hello through the proxy")  # still usable
        writer.close()
    finally:
        await env.close()


@pytest.mark.parametrize(
    "target",
    ["http://agent:secret@site.example.com:{port}/page", "http://site.example.com:+{port}/page"],
    ids=["user-info", "signed-port"],
)
async def test_a_url_that_does_not_parse_is_400_invalid_url(env, target) -> None:
    """As for WebFetch, an agent's URL that does not parse is `invalid_url`, a 400 (the
    request is malformed, not refused by a rule), audited as a denial without the secret."""
    target = target.format(port=env.upstream_port)
    raw = await raw_exchange(
        env.port,
        f"GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n".encode(),
        read_timeout=2,
    )
    status, headers, body = parse_head(raw)
    assert status == 400
    assert headers["x-gateway-reason"] == "invalid_url" and headers["x-gateway-rule"] == "url"
    assert body.count(b"\n") == 1
    [record] = env.records("proxy_http")
    assert record["event"]["type"] == ["denied"]
    assert record["policy"]["reason"] == "invalid_url"
    assert "secret" not in orjson.dumps(record).decode()


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: 101\r\n\r\n" + "x" * 101,
        "Transfer-Encoding: chunked\r\n\r\n65\r\n" + "x" * 101,
    ],
    ids=["content-length", "chunked"],
)
async def test_a_body_over_max_body_bytes_is_413(tmp_path, make_config, framing) -> None:
    env = await start_env(tmp_path, make_config, server=ServerConfig(max_body_bytes=100))
    try:
        raw = await raw_exchange(
            env.port,
            f"POST {env.url('/echo')} HTTP/1.1\r\n{framing}\r\n0\r\n\r\n".encode(),
            read_timeout=2,
        )
        status, headers, _ = parse_head(raw)
        assert status == 413 and headers["x-gateway-reason"] == "request_too_large"
        assert headers["connection"] == "close"
        [record] = env.records("proxy_http")
        assert record["error"]["code"] == "request_too_large"
        assert record["http"]["response"]["status_code"] == 413
    finally:
        await env.close()


async def test_a_request_while_draining_is_503_with_retry_after(env) -> None:
    """As on the HTTP API (unavailable, Retry-After set), and audited."""
    env.services.draining = True
    raw = await raw_exchange(
        env.port, f"GET {env.url('/page')} HTTP/1.1\r\n\r\n".encode(), read_timeout=2
    )
    status, headers, _ = parse_head(raw)
    assert status == 503 and headers["x-gateway-reason"] == "unavailable"
    assert headers["retry-after"] == "5" and headers["connection"] == "close"
    [record] = env.records("proxy_http")
    assert record["error"]["code"] == "unavailable"


async def test_refusals_sent_ahead_are_each_answered_and_recorded_in_order(env) -> None:
    # A refusal is decided in the read that brought its head, with no task; a long run of
    # pipelined ones (more than the head buffer's bound, more than the interpreter's recursion
    # limit) is still answered one by one, in order, each with its record.
    count = 1200
    requests = [
        f"GET http://denied.example.org/{n} HTTP/1.1\r\nHost: denied.example.org\r\n\r\n".encode()
        for n in range(count)
    ]
    requests.append(get_request(env, "/echo?n=last", "Connection: close\r\n"))
    raw = await raw_exchange(env.port, b"".join(requests), read_timeout=30)
    assert raw.count(b"HTTP/1.1 403") == count and raw.count(b"HTTP/1.1 200") == 1
    assert raw.rindex(b"HTTP/1.1 403") < raw.index(b"HTTP/1.1 200")
    records = env.records("proxy_http")
    assert len(records) == count + 1
    urls = [r["url"]["original"] for r in records[:count]]
    assert urls == [f"http://denied.example.org/{n}" for n in range(count)]
