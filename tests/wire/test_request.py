"""The strict request reader (wire/request): the one-regex fast paths (for a header line, for a
whole short head) accept and read exactly what the line-by-line checks do, and lookups by
name see every spelling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.wire import http1
from gateway.wire.request import (
    BadRequestError,
    ChunkedDecoder,
    _any_head,
    _header,
    parse_request_head,
)

REQUEST_LINE = b"GET http://site.example.com/ HTTP/1.1"
# Bytes that matter to a header line's grammar, and a few that do not.
LINE_BYTES = st.binary(max_size=40) | st.lists(
    st.sampled_from(
        [b"A", b"z", b"-", b":", b" ", b"\t", b"\x00", b"\x7f", b"\x0b", b"\xe9", b"@"]
    ),
    max_size=12,
).map(b"".join)


def line_by_line(line: bytes) -> tuple[str, str] | None:
    try:
        return _header(line)
    except BadRequestError:
        return None


@settings(max_examples=400, deadline=None)
@given(st.lists(LINE_BYTES.filter(lambda b: b"\r" not in b and b"\n" not in b), max_size=4))
def test_fast_path_agrees_with_the_line_checks(lines) -> None:
    expected = [line_by_line(line) for line in lines]
    try:
        head = parse_request_head(b"\r\n".join([REQUEST_LINE, *lines]))
    except BadRequestError:
        # refused: some line is bad, or the framing headers are (their own checks)
        assert None in expected or any(
            n.lower() in ("content-length", "transfer-encoding") for n, _ in filter(None, expected)
        )
        return
    assert list(head.headers) == expected


def _read(parse: object, head: bytes) -> object:
    try:
        read = parse(head)  # type: ignore[operator]
    except BadRequestError:
        return "refused"
    return (read.method, read.target, read.version, read.headers, read.fields,
            read.content_length, read.chunked, read.keep_alive)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(
        [
            REQUEST_LINE,
            b"HEAD http://a/ HTTP/1.0",
            b"G@T / HTTP/1.1",
            b"GET  / HTTP/1.1",
            b"GET /\xe9 HTTP/1.1",
            b"GET / HTTP/2.0",
            b"POST http://a/x?y HTTP/1.1",
        ]
    ),  # fmt: skip
    st.lists(
        LINE_BYTES.filter(lambda b: b"\r" not in b and b"\n" not in b)
        | st.sampled_from(
            [
                b"Content-Length: 3",
                b"Transfer-Encoding: chunked",
                b"Connection: close",
                b"Proxy-Connection: keep-alive",
                b"Host:  a.example \t",
                b"Content-Length: x",
            ]
        ),  # fmt: skip
        max_size=5,
    ),
)
def test_a_short_head_reads_as_the_line_by_line_reader_reads_it(request_line, lines) -> None:
    """A head under MAX_LINE is checked in one match and split as text; it reads the same,
    or is refused the same, as line by line (which says which rule a head breaks)."""
    head = b"\r\n".join([request_line, *lines])
    assert _read(parse_request_head, head) == _read(_any_head, head)


@pytest.mark.parametrize(
    ("lines", "name", "values"),
    [
        ((b"Host: a", b"X-A: 1", b"x-a: 2"), "X-A", ["1", "2"]),
        ((b"HOST:  spaced \t",), "host", ["spaced"]),
        ((b"Accept:",), "accept", [""]),
        ((b"Host: a",), "x-absent", []),
    ],
    ids=["any-case-in-order", "trimmed", "empty-value", "absent"],
)
def test_lookups_by_name(lines, name, values) -> None:
    head = parse_request_head(b"\r\n".join([REQUEST_LINE, *lines]))
    assert head.get_all(name) == values


def test_a_repeated_single_header_is_refused_on_lookup() -> None:
    head = parse_request_head(b"\r\n".join([REQUEST_LINE, b"Host: a", b"host: b"]))
    with pytest.raises(BadRequestError, match="repeated"):
        head.get("Host")


@pytest.mark.parametrize(
    ("head", "message"),
    [
        (REQUEST_LINE + b"\r\nX: a\rb", "bare CR or LF"),
        (REQUEST_LINE + b"\r\nX: a\nb", "bare CR or LF"),
        (REQUEST_LINE + b"\n", "bare CR or LF"),
        (REQUEST_LINE + b"\r\nX: " + b"a" * 9000, "over 8192 bytes"),
        (REQUEST_LINE + b"\r\n\tX: a", "obs-fold"),
        (REQUEST_LINE + b"\r\nX : a", "NAME: VALUE"),
        (REQUEST_LINE + b"\r\nX: a\x01", "control characters in the X header"),
    ],
    ids=["bare-cr", "bare-lf", "trailing-lf", "long-line", "obs-fold", "space-colon", "ctl"],
)
def test_refusals_say_why(head, message) -> None:
    with pytest.raises(BadRequestError, match=message):
        parse_request_head(head)


FRAMING_VALUES = st.sampled_from(
    [b"0", b"12", b"012", b"-1", b"1e3", b" 7", b"chunked", b"Chunked", b"gzip, chunked", b""]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(FRAMING_VALUES, max_size=2), st.lists(FRAMING_VALUES, max_size=2))
def test_requests_and_responses_are_framed_by_one_rule(lengths, codings) -> None:
    """The same Content-Length and Transfer-Encoding values frame a request and a response
    alike (one rule, wire.http1.body_framing): both readers accept, or both refuse."""
    fields = [b"Content-Length: " + v for v in lengths]
    fields += [b"Transfer-Encoding: " + v for v in codings]
    try:
        request = parse_request_head(b"\r\n".join([b"POST http://a.example/ HTTP/1.1", *fields]))
        as_request: tuple[int | None, bool] | None = (request.content_length, request.chunked)
    except BadRequestError:
        as_request = None
    try:
        response = http1.parse_response_head(b"\r\n".join([b"HTTP/1.1 200 OK", *fields]), "GET")
        as_response: tuple[int | None, bool] | None = (response.content_length, response.chunked)
    except http1.BadResponseError:
        as_response = None
    assert as_request == as_response


def _decode(data: bytes, cuts: list[int]) -> tuple[bytes, bytes] | None:
    """A chunked request body fed in the pieces `cuts` makes: (body, what followed it), or
    None when refused."""
    decoder = ChunkedDecoder()
    buffer, body = bytearray(), b""
    bounds = [0, *cuts, len(data)]
    fed = 0
    try:
        for start, end in zip(bounds, bounds[1:], strict=False):
            buffer += data[start:end]
            fed = end
            body += decoder.feed(buffer)
            if decoder.done:
                break
    except BadRequestError:
        return None
    if not decoder.done:
        return None
    return body, bytes(buffer) + data[fed:]


CHUNKED = st.sampled_from(
    [
        b"3\r\nabc\r\n0\r\n\r\n",
        b"3;x=1\r\nabc\r\n0\r\nT: v\r\n\r\n",
        b'3;x="q"\r\nabc\r\n0\r\n\r\nGET',
        b"3 \r\nabc\r\n0\r\n\r\n",
        b"3\r\nabcX0\r\n\r\n",
        b"3\nabc\r\n0\r\n\r\n",
        b"zz\r\nab\r\n0\r\n\r\n",
        b"0\r\n folded\r\n\r\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(CHUNKED, st.lists(st.integers(min_value=1, max_value=30), max_size=4))
def test_a_chunked_request_body_reads_the_same_however_it_is_cut(data, cuts) -> None:
    """The request's chunked decoding is the response's (http1.ChunkedBody): one answer for
    a body whole or in pieces, the bytes after it left for the next request."""
    cuts = sorted({c for c in cuts if c < len(data)})
    whole = _decode(data, [])
    assert _decode(data, cuts) == whole
    response_side = http1.ChunkedBody()
    out: list = []
    try:
        used = response_side.feed(data, out)
        as_response = (b"".join(out), data[used:]) if response_side.done else None
    except http1.BadResponseError:
        as_response = None
    assert whole == as_response
