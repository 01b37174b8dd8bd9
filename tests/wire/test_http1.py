"""One set of HTTP/1 limits for both response readers: each limit at its edge and one past
it, sent by a scripted upstream all at once and byte by byte, read through the WebFetch
client and through the forward proxy, with one outcome for all four; and the reader itself
(`wire.http1`) giving the same answer however a response is split."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import UpstreamError
from gateway.fetch.client import Fetcher, FetchOptions
from gateway.fetch.resolver import parse_static_hosts
from gateway.policy.engine import decide_url
from gateway.policy.model import Limits, Timeouts
from gateway.wire import http1
from gateway.wire.http1 import BadResponseError, ChunkedBody, ResponseFraming
from tests.policy.conftest import make_policy
from tests.server.proxy.env import start_env
from tests.upstream import ScriptedUpstream

REFUSED = "refused"


def scripted(reply: bytes, *, byte_by_byte: bool) -> ScriptedUpstream:
    """Answers every request with `reply`, whole or one byte per write."""
    return ScriptedUpstream([reply], repeat=True, drip=1 if byte_by_byte else 0, pause=0)


def response(*fields: bytes, body: bytes = b"", status: bytes = b"HTTP/1.1 200 OK") -> bytes:
    return b"\r\n".join((status, b"Content-Type: text/plain", *fields)) + b"\r\n\r\n" + body


def chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    return response(
        b"Transfer-Encoding: chunked", body=b"".join(parts) + b"0\r\n" + trailer + b"\r\n"
    )


def field_line(length: int) -> bytes:
    """A header field line of exactly `length` bytes."""
    return b"X-Filler: " + b"f" * (length - len(b"X-Filler: "))


def chunk_line(length: int) -> bytes:
    """The chunk-size line of a 2-byte chunk, exactly `length` bytes before its CRLF."""
    return b"2;" + b"e" * (length - 2) + b"\r\nok\r\n"


def trailer_of(total: int) -> bytes:
    """Trailer field lines whose bytes (each with its CRLF) add up to `total`."""
    lines, left = [], total
    while left:
        size = min(left, 1000)
        if 0 < left - size < 20:
            size = left - 20
        lines.append(b"X-T: " + b"t" * (size - 7) + b"\r\n")
        left -= size
    return b"".join(lines)


MAX = http1.MAX_LINE
CASES = [
    ("content-length", response(b"Content-Length: 5", body=b"hello"), b"hello"),
    ("past-content-length", response(b"Content-Length: 5", body=b"helloEXTRA"), b"hello"),
    ("past-last-chunk", chunked(b"2\r\nok\r\n") + b"EXTRA", b"ok"),
    ("field-line-at-limit", response(b"Content-Length: 2", field_line(MAX), body=b"ok"), b"ok"),
    ("field-line-over", response(b"Content-Length: 2", field_line(MAX + 1), body=b"ok"), REFUSED),
    (
        "status-line-over",
        response(b"Content-Length: 2", body=b"ok", status=b"HTTP/1.1 200 " + b"r" * MAX),
        REFUSED,
    ),
    (
        "fields-at-count",
        response(b"Content-Length: 2", *[b"X-N: n"] * (http1.MAX_HEADERS - 2), body=b"ok"),
        b"ok",
    ),
    (
        "fields-over-count",
        response(b"Content-Length: 2", *[b"X-N: n"] * (http1.MAX_HEADERS - 1), body=b"ok"),
        REFUSED,
    ),
    (
        "head-over-size",
        response(b"Content-Length: 2", *[field_line(1000)] * 66, body=b"ok"),
        REFUSED,
    ),
    ("chunk-line-at-limit", chunked(chunk_line(http1.MAX_CHUNK_LINE)), b"ok"),
    ("chunk-line-over", chunked(chunk_line(http1.MAX_CHUNK_LINE + 1)), REFUSED),
    ("chunk-extension-1mib", chunked(chunk_line(1024 * 1024)), REFUSED),
    ("trailer-at-limit", chunked(b"2\r\nok\r\n", trailer=trailer_of(http1.MAX_TRAILER)), b"ok"),
    ("trailer-over", chunked(b"2\r\nok\r\n", trailer=trailer_of(http1.MAX_TRAILER + 1)), REFUSED),
    (
        "fields-and-trailers-at-count",
        response(
            b"Transfer-Encoding: chunked",
            *[b"X-N: n"] * (http1.MAX_HEADERS - 66),
            body=b"2\r\nok\r\n0\r\n" + b"X-T: t\r\n" * 64 + b"\r\n",
        ),
        b"ok",
    ),
    (
        "fields-and-trailers-over-count",
        response(
            b"Transfer-Encoding: chunked",
            *[b"X-N: n"] * (http1.MAX_HEADERS - 65),
            body=b"2\r\nok\r\n0\r\n" + b"X-T: t\r\n" * 64 + b"\r\n",
        ),
        REFUSED,
    ),
    ("chunk-extension-quoted", chunked(b'2;a="x y";b=c;d\r\nok\r\n'), b"ok"),
    ("chunk-extension-with-space", chunked(b"2;a b\r\nok\r\n"), REFUSED),
    ("chunk-extension-empty", chunked(b"2;\r\nok\r\n"), REFUSED),
    ("chunk-extension-not-ascii", chunked(b"2;a=\xff\r\nok\r\n"), REFUSED),
    ("chunk-size-leading-zeros", chunked(b"0002\r\nok\r\n"), b"ok"),
    (
        "status-without-reason",
        response(b"Content-Length: 2", body=b"ok", status=b"HTTP/1.1 200"),
        b"ok",
    ),
    (
        "status-over-599",
        response(b"Content-Length: 2", body=b"ok", status=b"HTTP/1.1 999 X"),
        REFUSED,
    ),
    ("length-leading-zeros", response(b"Content-Length: 0002", body=b"ok"), b"ok"),
    ("value-not-ascii", response(b"Content-Length: 2", b"X-A: \xff\xfe", body=b"ok"), b"ok"),
    ("value-with-tabs", response(b"Content-Length: 2", b"X-A:\ta\tb", body=b"ok"), b"ok"),
    ("value-empty", response(b"Content-Length: 2", b"X-A:", body=b"ok"), b"ok"),
    ("trailer-not-ascii", chunked(b"2\r\nok\r\n", trailer=b"X-T: \xff\r\n"), b"ok"),
    (
        "bare-lf-head",
        b"HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nok",
        REFUSED,
    ),
    ("bare-lf-chunk-line", chunked(b"2\nok\r\n"), REFUSED),
    ("space-after-chunk-size", chunked(b"2 \r\nok\r\n"), REFUSED),
    ("obs-fold", response(b"Content-Length: 2", b"X-A: a", b" folded", body=b"ok"), REFUSED),
    (
        "length-and-chunked",
        response(b"Content-Length: 2", b"Transfer-Encoding: chunked", body=b"2\r\nok\r\n0\r\n\r\n"),
        REFUSED,
    ),
]
SPLITS = pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "byte-by-byte"])
TABLE = pytest.mark.parametrize(
    ("reply", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)


def fetch_policy(port: int):
    return make_policy(
        allow=[".example.com"],
        ports=(80, 443, port),
        net_allow=["127.0.0.0/8"],
        timeouts=Timeouts(connect=2, read=5, total=20),
        limits=Limits(max_response_bytes=5_000_000, content_types=("text/*",)),
    )


async def through_webfetch(port: int, *, gzipped: bool = False) -> bytes | str:
    fetcher = Fetcher(static_hosts=parse_static_hosts({"site.example.com": ["127.0.0.1"]}))
    policy = fetch_policy(port)
    try:
        decision, target = decide_url(policy, f"http://site.example.com:{port}/")
        assert decision.allowed and target is not None
        try:
            first = await fetcher.fetch(policy, target, FetchOptions())
            # A second request: a connection whose upstream sent past its end is not reused.
            await fetcher.fetch(policy, target, FetchOptions())
        except UpstreamError:
            return REFUSED
        return first.body
    finally:
        await fetcher.close()


async def through_proxy(tmp_path, make_config, port: int) -> bytes | str:
    env = await start_env(tmp_path, make_config, extra_ports=(port,))
    try:
        # The proxy forwards the upstream's fields: this client takes lines as long as they.
        big = 2 * http1.MAX_LINE
        async with aiohttp.ClientSession(max_line_size=big, max_field_size=big) as session:
            bodies = []
            for _ in range(2):
                try:
                    async with session.get(
                        f"http://site.example.com:{port}/", proxy=env.proxy_url
                    ) as answer:
                        if answer.status == 502:
                            assert answer.headers["X-Gateway-Reason"] == "upstream_error"
                            return REFUSED
                        assert answer.status == 200
                        bodies.append(await answer.read())
                except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError):
                    # Refused once the upstream's head had been taken: the answer is cut
                    # short (mid-body, or before its head left with the first body bytes).
                    return REFUSED
        return bodies[0]
    finally:
        await env.close()


@TABLE
@SPLITS
async def test_webfetch_applies_each_limit_however_the_bytes_arrive(
    reply, expected, byte_by_byte
) -> None:
    upstream = scripted(reply, byte_by_byte=byte_by_byte)
    port = await upstream.start()
    try:
        assert await through_webfetch(port) == expected
        if expected != REFUSED and b"EXTRA" in reply:
            assert upstream.connections == 2  # the spoiled connection was not reused
    finally:
        await upstream.close()


@TABLE
@SPLITS
async def test_the_proxy_applies_each_limit_however_the_bytes_arrive(
    tmp_path, make_config, reply, expected, byte_by_byte
) -> None:
    upstream = scripted(reply, byte_by_byte=byte_by_byte)
    port = await upstream.start()
    try:
        assert await through_proxy(tmp_path, make_config, port) == expected
        if expected != REFUSED and b"EXTRA" in reply:
            assert upstream.connections == 2
    finally:
        await upstream.close()


def gzip_members(count: int) -> bytes:
    return b"".join(gzip.compress(b"m") for _ in range(count))


@pytest.mark.parametrize(
    ("members", "expected"),
    [
        (http1.MAX_GZIP_MEMBERS, b"m" * http1.MAX_GZIP_MEMBERS),
        (http1.MAX_GZIP_MEMBERS + 1, REFUSED),
    ],
    ids=["at-limit", "over"],
)
@SPLITS
async def test_gzip_members_are_counted_however_the_bytes_arrive(
    members, expected, byte_by_byte
) -> None:
    """Only WebFetch decodes bodies; the proxy relays them as they are."""
    body = gzip_members(members)
    reply = response(b"Content-Encoding: gzip", b"Content-Length: %d" % len(body), body=body)
    upstream = scripted(reply, byte_by_byte=byte_by_byte)
    port = await upstream.start()
    try:
        assert await through_webfetch(port) == expected
    finally:
        await upstream.close()


# --- the reader alone ---------------------------------------------------------------------


def read_whole(reply: bytes, cuts: list[int]) -> tuple[str, bytes]:
    """Feed `reply` to a fresh ResponseFraming cut at `cuts`: (outcome, what it passed on)."""
    framing = ResponseFraming()
    framing.expect("GET")
    passed, start = b"", 0
    try:
        for end in [*sorted(set(cuts)), len(reply)]:
            piece = reply[start:end]
            start = end
            passed += framing.feed(piece)
    except BadResponseError:
        return REFUSED, b""
    return ("spoiled" if framing.spoiled else "clean"), passed


@settings(max_examples=300, deadline=None)
@given(
    case=st.sampled_from([c for c in CASES if len(c[1]) < 4096]),
    cuts=st.lists(st.integers(min_value=0, max_value=4096), max_size=8),
)
def test_the_reader_gives_one_answer_however_a_response_is_split(case, cuts) -> None:
    _, reply, _ = case
    assert read_whole(reply, [c % (len(reply) + 1) for c in cuts]) == read_whole(reply, [])


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.binary(min_size=1, max_size=40), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
    rechunk=st.booleans(),
)
def test_chunked_bodies_decode_the_same_however_they_are_split(parts, cuts, rechunk) -> None:
    wire = b"".join(b"%x;x=1\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\nX-T: t\r\n\r\nNEXT"
    outputs = []
    for where in ([], sorted(c % (len(wire) + 1) for c in cuts)):
        body = ChunkedBody(rechunk=rechunk)
        out: list[bytes | memoryview] = []
        used, start = 0, 0
        for end in [*where, len(wire)]:
            if not body.done:
                used += body.feed(wire[start:end], out)
            start = end
        outputs.append((b"".join(out), used, body.done))
    assert outputs[0] == outputs[1]
    decoded, used, done = outputs[0]
    assert done and used == len(wire) - len(b"NEXT")
    if rechunk:
        assert decoded == b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    else:
        assert decoded == b"".join(parts)


def test_a_head_with_a_bare_lf_is_refused_before_it_ends() -> None:
    framing = ResponseFraming()
    framing.expect("GET")
    with pytest.raises(BadResponseError, match="bare CR or LF"):
        framing.feed(b"HTTP/1.1 200 OK\nContent-Length: 2")


def test_bytes_nobody_asked_for_spoil_the_connection() -> None:
    framing = ResponseFraming()
    assert framing.feed(b"HTTP/1.1 200 OK\r\n\r\n") == b""
    assert framing.spoiled


def test_only_whole_lines_are_passed_on() -> None:
    framing = ResponseFraming()
    framing.expect("GET")
    assert framing.feed(b"HTTP/1.1 200 OK\r\nTransfer-Enc") == b""
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert framing.feed(b"oding: chunked\r\n\r\n2;a=") == head
    assert framing.feed(b"b\r\nok\r") == b"2;a=b\r\nok"
    assert framing.feed(b"\n0\r\n\r\nEXTRA") == b"\r\n0\r\n\r\n"
    assert framing.spoiled


# --- the reader against aiohttp's parser ----------------------------------------------------

STATUS_LINES = [
    b"HTTP/1.1 200 OK",
    b"HTTP/1.0 200 OK",
    b"HTTP/1.1 404 Not Found",
    b"HTTP/1.1 200",
    b"HTTP/1.1 200 \xe9t\xe9",
    b"HTTP/1.1 99 X",
    b"HTTP/2 200 OK",
    b"HTTP/1.1 200  OK",
]
FIELDS = [
    b"X-A: b",
    b"X-A:b",
    b"X-A: \xff",
    b"X-A: a\tb",
    b"X-A:",
    b"X-A : b",
    b" X-A: b",
    b"X-A: b\x00",
    b"X_A: b",
    b"X-A: b ",
    b"Content-Type: text/plain",
    b"Server: s",
]
EXTENSIONS = [
    b"",
    b";a",
    b";a=b",
    b';a="b c"',
    b";a b",
    b";",
    b";a=\xff",
    b" ;a",
    b";a=b;c",
    b";a=",
    b'";a="\\""',
    b"\t",
]
TRAILERS = [b"", b"X-T: t\r\n", b"X-T:t\r\nX-U: u\r\n", b"X T: t\r\n", b" X-T: t\r\n"]


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(the bytes, the body they mean if read as intended) from pieces both valid and not."""
    status = draw(st.sampled_from(STATUS_LINES))
    fields = draw(st.lists(st.sampled_from(FIELDS), max_size=4))
    body = draw(st.binary(max_size=30))
    if draw(st.booleans()):
        cuts = sorted(set(draw(st.lists(st.integers(0, len(body)), max_size=3))))
        bounds = [0, *cuts, len(body)]
        parts = [body[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        wire = b"".join(
            b"%x%b\r\n%b\r\n" % (len(p), draw(st.sampled_from(EXTENSIONS)), p) for p in parts
        )
        wire += b"0\r\n" + draw(st.sampled_from(TRAILERS)) + b"\r\n"
        framing = b"Transfer-Encoding: chunked"
    else:
        wire, framing = body, b"Content-Length: %d" % len(body)
    head = b"\r\n".join([status, framing, *fields]) + b"\r\n\r\n"
    return head + wire + draw(st.sampled_from([b"", b"EXTRA"])), body


async def parse_with_aiohttp(data: bytes) -> tuple[int, bytes, bool]:
    """aiohttp's own (C) response parser, configured as the Fetcher configures it."""
    from aiohttp.base_protocol import BaseProtocol
    from aiohttp.client_exceptions import ClientPayloadError
    from aiohttp.http_parser import HttpResponseParser

    loop = asyncio.get_running_loop()
    parser = HttpResponseParser(
        BaseProtocol(loop),
        loop,
        2**16,
        max_line_size=http1.MAX_LINE + 2,
        max_field_size=http1.MAX_LINE + 2,
        max_headers=http1.MAX_HEADERS,
        payload_exception=ClientPayloadError,
        response_with_body=True,
        auto_decompress=False,
    )
    messages, _, _ = parser.feed_data(data)
    message, payload = messages[-1]
    ended = payload.is_eof()
    return message.code, (await payload.read()) if ended else b"", ended


@settings(max_examples=400, deadline=None)
@given(case=responses())
def test_what_the_reader_accepts_aiohttp_reads_the_same_way(case) -> None:
    """The reader is the stricter: whatever it passes on, aiohttp's parser takes without
    complaint, as the same one response with the same body, ending where the reader said."""
    wire, body = case
    framing = ResponseFraming()
    framing.expect("GET")
    try:
        accepted = framing.feed(wire)
    except BadResponseError:
        return  # refused by the reader: aiohttp never sees it
    status, read, ended = asyncio.run(parse_with_aiohttp(accepted))
    assert ended and read == body, (wire, accepted)
    assert framing.spoiled == wire.endswith(b"EXTRA")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.binary(max_size=12).map(lambda b: b.replace(b"\r\n", b""))
        | st.sampled_from(
            [b"Content-Type: text/html", b"X:", b" folded", b"Bad Name: v", b"N:\tv\x7f", b"N: v\r"]
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_whole_head_check_agrees_with_the_line_check(lines: list[bytes]) -> None:
    """A head's field lines are checked in one match (`_FIELDS`); it accepts exactly the heads
    whose every line FIELD accepts, so the line-by-line refusals keep their meaning."""
    block = b"\r\n".join(lines)
    if b"\r\n" in b"".join(lines):  # a line holding a CRLF is two lines, not one
        return
    every_line = all(http1.FIELD.match(line) for line in block.split(b"\r\n"))
    assert (http1._FIELDS.match(block) is not None) == every_line


def _head_outcome(read: Any, raw: bytes) -> tuple[Any, ...]:
    try:
        head = read(raw, "GET")
    except BadResponseError as exc:
        return ("refused", str(exc))
    return (
        head.status,
        head.reason,
        head.version,
        head.headers,
        head.content_length,
        head.declared_length,
        head.chunked,
        head.keep_alive,
        head.connection_tokens,
        head.raw[head.fields_at :],
    )


_FIELD_LINES = st.sampled_from(
    [
        b"Content-Length: 12",
        b"content-length:12  ",
        b"Content-Length: 1x",
        b"Transfer-Encoding: chunked",
        b"TRANSFER-ENCODING:\tgzip, chunked",
        b"Connection: keep-alive",
        b"Connection: close, X-Extra",
        b"connection:",
        b"Server: nginx/1.22.1",
        b"X-Gateway-Reason: forged",
        b"X-Content-Length: 5",
        b"N:\tv\x7f",
        b" folded",
        b"Bad Name: v",
        b"E:",
    ]
) | st.binary(max_size=10)


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.0 204", b"HTTP/1.1 304 ", b"HTTP/1.1 099 x"]),
    st.lists(_FIELD_LINES, max_size=6),
)
def test_the_usual_head_reads_as_the_line_by_line_reader_reads_it(
    status: bytes, lines: list[bytes]
) -> None:
    """Heads under MAX_LINE take a two-match path; it gives the same head, or the same
    refusal, as the reader that goes line by line (which says which rule a head breaks)."""
    raw = b"\r\n".join([status, *lines])
    fast = _head_outcome(http1.parse_response_head, raw)
    slow = _head_outcome(http1._any_head, raw)
    if fast[0] == "refused" and slow[0] == "refused":
        return  # both refuse; the message may name the first rule the other path checks
    assert fast == slow, raw


def test_a_head_over_the_line_limit_is_read_line_by_line() -> None:
    long_value = b"v" * (http1.MAX_LINE - 10)
    raw = b"HTTP/1.1 200 OK\r\nA: " + long_value + b"\r\nContent-Length: 3"
    head = http1.parse_response_head(raw, "GET")
    assert head.content_length == 3 and head.headers[0] == (b"A", long_value)
    with pytest.raises(BadResponseError, match="over"):
        http1.parse_response_head(b"HTTP/1.1 200 OK\r\nA: " + b"v" * http1.MAX_LINE, "GET")
