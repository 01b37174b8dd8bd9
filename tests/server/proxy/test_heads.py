"""Every request head the proxy reads gets its answer and its audit record at once: heads that
end their lines with a bare LF (and so never send CRLF CRLF), heads cut off by the end of the
stream, over-long lines still waiting for their end, and, by fuzzing over a real socket, any
bytes at all followed by a close or by CRLF CRLF. And the response head a client gets carries
exactly the upstream's end-to-end fields."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import ServerConfig
from gateway.server.proxy.responses import RESPONSE_HOP_BY_HOP, response_head
from gateway.wire import http1
from gateway.wire.request import parse_request_head
from tests.server.proxy.env import ProxyEnv, parse_head, start_env

# Long enough that a test relying on it would hit its own socket timeout first: every answer
# below comes from the head itself, never from server.header_timeout.
HEADER_TIMEOUT = 120.0
SOCKET_TIMEOUT = 20.0


class ProxyThread:
    """A proxy on its own event loop in a thread, so that blocking test code (hypothesis
    examples) can talk to it over real sockets."""

    def __init__(self, tmp_path: Any, make_config: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.env: ProxyEnv = self.run(
            start_env(tmp_path, make_config, server=ServerConfig(header_timeout=HEADER_TIMEOUT))
        )

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self.run(self.env.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def record_count(self) -> int:
        return len(self.env.records())


@pytest.fixture
def proxy(tmp_path, make_config) -> Iterator[ProxyThread]:
    running = ProxyThread(tmp_path, make_config)
    try:
        yield running
    finally:
        running.close()


def exchange(port: int, data: bytes, *, then_close: bool) -> bytes:
    """Send `data`, half-close when `then_close`, and read until the proxy closes or has
    sent a whole response head; raises TimeoutError if it does neither in time."""
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT) as sock:
        try:
            sock.sendall(data)
            if then_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the last byte went out: the answer is still there to read
        received = b""
        while b"\r\n\r\n" not in received:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        return received


def assert_refused(raw: bytes, status: int = 400) -> None:
    code, headers, _ = parse_head(raw)
    assert code == status, raw[:200]
    assert headers["x-gateway-reason"] == "bad_request"
    assert headers["x-gateway-request-id"]


SILENT_BEFORE = [
    ("lf-lines", b"GET http://site.example.com/ HTTP/1.1\nHost: site.example.com\n\n"),
    ("lf-request-line", b"GET http://site.example.com/ HTTP/1.1\n"),
    ("lf-blank-line-first", b"\nGET http://site.example.com/ HTTP/1.1\r\n"),
    ("crlf-then-lf", b"GET http://site.example.com/ HTTP/1.1\r\nHost: x\r\n\n"),
    ("lf-then-crlf", b"GET http://site.example.com/ HTTP/1.1\r\nHost: x\n\r\n"),
    ("bare-cr", b"GET http://site.example.com/ HTTP/1.1\rHost: x"),
    ("long-second-line", b"GET http://site.example.com/ HTTP/1.1\r\nX-A: " + b"a" * 9000),
    ("long-line-then-more", b"GET http://x/?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x"),
]


@pytest.mark.parametrize("data", [c[1] for c in SILENT_BEFORE], ids=[c[0] for c in SILENT_BEFORE])
def test_a_head_sure_to_be_refused_is_answered_without_waiting(proxy, data) -> None:
    """The connection stays open on the client's side: the answer comes from the bytes."""
    raw = exchange(proxy.env.port, data, then_close=False)
    assert_refused(raw)
    [record] = proxy.env.records("proxy_http")
    assert record["error"]["code"] == "bad_request"
    assert record["http"]["response"]["status_code"] == 400


def test_a_bare_lf_head_gets_the_reason_in_its_answer(proxy) -> None:
    raw = exchange(proxy.env.port, b"GET http://site.example.com/ HTTP/1.1\n\n", then_close=False)
    assert_refused(raw)
    assert b"bare CR or LF" in raw


@pytest.mark.parametrize(
    "data",
    [b"GET http://site.example.com/ HTTP/1.1\r\nHost: x\r\n", b"G", b"\r\n\r\nGET", b"\r"],
    ids=["no-blank-line", "one-byte", "after-blank-lines", "lone-cr"],
)
def test_a_head_cut_off_by_the_end_of_the_stream_is_answered_and_recorded(proxy, data) -> None:
    raw = exchange(proxy.env.port, data, then_close=True)
    assert_refused(raw)
    [record] = proxy.env.records("proxy_http")
    assert record["error"]["code"] == "bad_request"


def test_blank_lines_then_a_close_are_no_request(proxy) -> None:
    assert exchange(proxy.env.port, b"\r\n\r\n", then_close=True) == b""
    assert proxy.env.records("proxy_http") == []


def test_a_second_head_on_a_kept_connection_is_read_the_same_way(proxy) -> None:
    env = proxy.env
    good = f"GET {env.url('/page')} HTTP/1.1\r\nHost: site.example.com:{env.upstream_port}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", env.port), timeout=SOCKET_TIMEOUT) as sock:
        sock.sendall(good.encode())
        first = b""
        while b"hello through the proxy" not in first and (chunk := sock.recv(65536)):
            first += chunk
        assert parse_head(first)[0] == 200
        sock.sendall(b"GET http://site.example.com/ HTTP/1.1\nHost: x\n\n")
        second = b""
        while chunk := sock.recv(65536):
            second += chunk
    assert_refused(second)
    assert [r["http"]["response"]["status_code"] for r in env.records("proxy_http")] == [200, 400]


# Pieces of request heads, so that the fuzzer reaches past the request line as well as
# sending noise. No framing headers: a valid head with a body would rightly wait for it.
FRAGMENTS = st.sampled_from(
    [
        b"GET ",
        b"CONNECT ",
        b"POST ",
        b"http://site.example.com/",
        b"site.example.com:443",
        b" HTTP/1.1",
        b" HTTP/1.0",
        b"\r\n",
        b"\n",
        b"\r",
        b"Host: site.example.com",
        b"X-A: b",
        b": ",
        b" ",
        b"\t",
        b"\x00",
        b"\xff",
    ]
)
HEAD_BYTES = st.lists(st.one_of(FRAGMENTS, st.binary(max_size=16)), max_size=12).map(b"".join)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=HEAD_BYTES, ending=st.sampled_from(["close", "terminator"]))
def test_any_head_gets_an_answer_or_a_close_and_a_record(proxy, data, ending) -> None:
    payload = data + (b"\r\n\r\n" if ending == "terminator" else b"")
    begun = payload
    while begun.startswith(b"\r\n"):  # blank lines before a request are skipped
        begun = begun[2:]
    if not begun:
        return  # no request was begun: nothing to answer
    before = proxy.record_count()
    raw = exchange(proxy.env.port, payload, then_close=ending == "close")
    # Answered (a whole head) or closed; either way within the socket timeout, long before
    # server.header_timeout, and on record.
    if raw:
        assert raw.startswith(b"HTTP/1.1 ") and b"\r\n\r\n" in raw, raw[:200]
    assert proxy.record_count() > before, payload


# --- the response head the client gets (pure) -------------------------------------------

_UPSTREAM_FIELDS = st.sampled_from(
    [
        b"Server: nginx",
        b"content-type:text/html  ",
        b"Content-Length: 7",
        b"Transfer-Encoding: chunked",
        b"Connection: keep-alive",
        b"Connection: close",
        b"Connection: X-Secret, keep-alive",
        b"X-Secret: a",
        b"Keep-Alive: timeout=5",
        b"TE: trailers",
        b"Trailer: X-Sum",
        b"Upgrade: h2c",
        b"Proxy-Authenticate: Basic",
        b"X-Gateway-Reason: forged",
        b"x-gateway-:",
        b"Tea: green",
        b"X-Gateway: kept",
        b'ETag: "abc"',
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_UPSTREAM_FIELDS, max_size=7),
    st.sampled_from(["GET", "HEAD"]),
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.0"]),
)
def test_the_client_gets_every_end_to_end_field_and_no_other(
    lines: list[bytes], method: str, version: bytes
) -> None:
    """Forwarded as they came (the usual head) or judged one by one (a Connection field that
    names other fields): either way exactly the end-to-end fields reach the client, in their
    order, with the framing the proxy chose."""
    raw = b"\r\n".join([b"HTTP/1.1 200 OK", *lines])
    try:
        upstream = http1.parse_response_head(raw, method)
    except http1.BadResponseError:
        return
    request = parse_request_head(
        b"%b http://a.example/ %b\r\nHost: a.example" % (method.encode(), version)
    )
    out, keep_alive, chunked, length = response_head(upstream, request)
    assert out.endswith(b"\r\n\r\n")
    sent = list(http1._any_head(out[:-4], method).headers)
    named = upstream.connection_tokens
    expected = [
        (name, value)
        for name, value in upstream.headers
        if name.lower() not in RESPONSE_HOP_BY_HOP | named
        and not name.lower().startswith(b"x-gateway-")
    ]
    framing = [(n, v) for n, v in sent if n in (b"Transfer-Encoding", b"Connection")]
    assert sent[: len(expected)] == expected and sent[len(expected) :] == framing
    assert length == upstream.declared_length
    assert chunked == (length is None and method != "HEAD" and version == b"HTTP/1.1")
    assert (b"Connection", b"close") in framing or keep_alive
