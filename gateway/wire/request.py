"""HTTP/1.x requests as the forward proxy reads them, with the grammar and framing rules of
`wire.http1` (the same token, field-value and field-line patterns, the same body framing),
so no two readers of the gateway can disagree about where a message ends.

Anything a lenient server and a strict one could read differently is refused rather than
repaired (request smuggling lives in that gap): bare CR or LF, obs-fold, spaces before the
colon, control characters in values, both Content-Length and Transfer-Encoding, repeated or
non-decimal Content-Length, any transfer coding but a lone `chunked`, bodies on GET, HEAD and
CONNECT, over-long lines. Pure: no sockets, no asyncio.
"""

from __future__ import annotations

import re

from gateway.wire.http1 import (
    BOTH_FRAMINGS,
    CHUNK_EXTENSION,
    CHUNK_FIELDS,
    CHUNK_LINE_BREAK,
    CHUNK_LINE_TOO_LONG,
    CHUNK_NO_CRLF,
    CHUNK_SIZE,
    CHUNK_TRAILER,
    CODING_NOT_CHUNKED,
    FIELD,
    LENGTH_NOT_DECIMAL,
    LENGTH_REPEATED,
    TOKEN,
    VALUE,
    ChunkedBody,
    FramingError,
    body_framing,
)

MAX_LINE = 8192
MAX_HEAD = 32 * 1024
MAX_HEADERS = 100

_TOKEN = re.compile(TOKEN + rb"\Z")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # what VALUE excludes
_TARGET = re.compile(rb"[\x21-\x7e]+\Z")
# A whole header line in one match (name, value): http1.FIELD. A line it refuses goes through
# `_header`, which says what is wrong; the two are held to each other by a hypothesis test.
_FIELD = FIELD
# A whole head whose every line `_request_line` and `_FIELD` accept (its length is checked
# apart), in one match.
_USUAL_HEAD = re.compile(rb"%b [\x21-\x7e]+ HTTP/1\.[01](?:\r\n%b:%b)*\Z" % (TOKEN, TOKEN, VALUE))
_CHUNK_PROBLEMS = {
    CHUNK_NO_CRLF: "a chunk is not followed by CRLF",
    CHUNK_LINE_TOO_LONG: "a chunk-size or trailer line is too long",
    CHUNK_LINE_BREAK: "a chunk-size or trailer line is malformed (lines end with CRLF)",
    CHUNK_SIZE: "a chunk size is not a hexadecimal number",
    CHUNK_EXTENSION: "a chunk extension is malformed",
    CHUNK_TRAILER: "the chunked trailer is malformed or too large",
    CHUNK_FIELDS: f"more than {MAX_HEADERS} trailer fields",
}
_FRAMING_PROBLEMS = {
    BOTH_FRAMINGS: "both Content-Length and Transfer-Encoding: ambiguous framing",
    LENGTH_REPEATED: "Content-Length is repeated",
    LENGTH_NOT_DECIMAL: "Content-Length is not a decimal number",
    CODING_NOT_CHUNKED: "the only transfer coding accepted is a single 'chunked'",
}
NO_BODY_METHODS = frozenset({"GET", "HEAD", "CONNECT", "TRACE"})
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
    }
)


class BadRequestError(ValueError):
    """The request cannot be read unambiguously; the message says what is wrong."""


class RequestHead:
    """A request head the reader accepted: its line, its fields (names as sent, values
    trimmed) and its framing. A plain slotted class, not a frozen dataclass: it is made once
    per request, and a frozen dataclass's __init__ sets each field through
    object.__setattr__."""

    __slots__ = (
        "method",
        "target",
        "version",
        "headers",
        "content_length",
        "chunked",
        "keep_alive",
        "fields",
    )

    def __init__(
        self,
        method: str,
        target: str,
        version: str,
        headers: tuple[tuple[str, str], ...],
        content_length: int | None,
        chunked: bool,
        keep_alive: bool,
        fields: dict[str, list[str]],
    ) -> None:
        self.method = method
        self.target = target
        self.version = version  # "HTTP/1.1" | "HTTP/1.0"
        self.headers = headers  # as sent (name case kept), values trimmed
        self.content_length = content_length
        self.chunked = chunked
        self.keep_alive = keep_alive
        # Values by lower-case name, in order: each lookup is one dict access.
        self.fields = fields

    def get(self, name: str) -> str | None:
        """The one value of a header that must not repeat; None when absent."""
        values = self.fields.get(name.lower())
        if values is None:
            return None
        if len(values) > 1:
            raise BadRequestError(f"the {name} header is repeated")
        return values[0]

    def get_all(self, name: str) -> list[str]:
        return list(self.fields.get(name.lower(), ()))

    @property
    def has_body(self) -> bool:
        return self.chunked or bool(self.content_length)

    def forwarded_headers(self) -> list[tuple[str, str]]:
        """The end-to-end headers: hop-by-hop ones, those `Connection` names, and every
        `Proxy-*` header removed (credentials for this proxy never travel upstream)."""
        connection = self.fields.get("connection")
        named = (
            {token.strip().lower() for value in connection for token in value.split(",")}
            if connection
            else ()
        )
        return [
            (n, v)
            for n, v in self.headers
            if (lower := n.lower()) not in HOP_BY_HOP
            and lower not in named
            and not lower.startswith("proxy-")
        ]


def parse_request_head(head: bytes) -> RequestHead:
    """A request head without its final blank line; raises BadRequestError."""
    if len(head) <= MAX_LINE and _USUAL_HEAD.match(head) and head.count(b"\r\n") <= MAX_HEADERS:
        # Every line is well formed and short: read as text, split, without a check per line.
        request_line, *lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ")
        headers = []
        for line in lines:
            name, _, value = line.partition(":")
            headers.append((name, value.strip(" \t")))
        return _framed(method, target, version, headers)
    return _any_head(head)


def _any_head(head: bytes) -> RequestHead:
    """Any request head, line by line: says which limit or rule it breaks."""
    if len(head) > MAX_HEAD:
        raise BadRequestError(f"the request head is over {MAX_HEAD} bytes")
    lines = head.split(b"\r\n")
    if max(map(len, lines)) > MAX_LINE:
        raise BadRequestError(f"a line of the request head is over {MAX_LINE} bytes")
    # Every CR and LF must belong to a CRLF: then there are as many of each as line breaks.
    breaks = len(lines) - 1
    if head.count(b"\r") != breaks or head.count(b"\n") != breaks:
        raise BadRequestError("bare CR or LF in the request head; lines end with CRLF")
    method, target, version = _request_line(lines[0])
    if breaks > MAX_HEADERS:
        raise BadRequestError(f"more than {MAX_HEADERS} header fields")
    headers = []
    match_field = _FIELD.match
    for line in lines[1:]:
        matched = match_field(line)
        if matched is None:
            headers.append(_header(line))  # raises, saying why
        else:
            headers.append((matched[1].decode("ascii"), matched[2].strip(b" \t").decode("latin-1")))
    return _framed(method, target, version, headers)


def _request_line(line: bytes) -> tuple[str, str, str]:
    parts = line.split(b" ")
    if len(parts) != 3:
        raise BadRequestError("the request line must be METHOD SP TARGET SP HTTP/1.1")
    method, target, version = parts
    if not _TOKEN.match(method):
        raise BadRequestError("the request method is not a token")
    if not _TARGET.match(target):
        raise BadRequestError("the request target is empty or has spaces or control characters")
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise BadRequestError("only HTTP/1.1 and HTTP/1.0 are spoken here")
    return method.decode("ascii"), target.decode("ascii"), version.decode("ascii")


def _header(line: bytes) -> tuple[str, str]:
    if not line or line[0] in b" \t":
        raise BadRequestError("obs-fold (a header line starting with white space) is refused")
    name, colon, value = line.partition(b":")
    if not colon or not _TOKEN.match(name):
        raise BadRequestError("a header line is not NAME: VALUE (no space before the colon)")
    value = value.strip(b" \t")
    if _BAD_VALUE.search(value):
        raise BadRequestError(f"control characters in the {name.decode('ascii')} header")
    return name.decode("ascii"), value.decode("latin-1")


def _framed(method: str, target: str, version: str, headers: list[tuple[str, str]]) -> RequestHead:
    """The head of these header lines (names as sent, values trimmed), and its framing."""
    fields: dict[str, list[str]] = {}
    for name, value in headers:
        lower = name.lower()
        values = fields.get(lower)
        if values is None:
            fields[lower] = [value]
        else:
            values.append(value)
    lengths = fields.get("content-length")
    codings = fields.get("transfer-encoding")
    content_length, chunked = None, False
    if lengths or codings:
        if codings and not lengths and version == "HTTP/1.0":
            raise BadRequestError("Transfer-Encoding in an HTTP/1.0 request")
        try:
            content_length, chunked = body_framing(
                [v.encode("latin-1") for v in lengths or ()],
                [v.encode("latin-1") for v in codings or ()],
            )
        except FramingError as exc:
            raise BadRequestError(_FRAMING_PROBLEMS[exc.kind]) from None
    if method in NO_BODY_METHODS and (chunked or content_length):
        raise BadRequestError(f"a {method} request must not carry a body")
    options = fields.get("connection", []) + fields.get("proxy-connection", [])
    if options:
        tokens = {t.strip().lower() for v in options for t in v.split(",")}
        keep_alive = "close" not in tokens and (version == "HTTP/1.1" or "keep-alive" in tokens)
    else:
        keep_alive = version == "HTTP/1.1"
    return RequestHead(
        method, target, version, tuple(headers), content_length, chunked, keep_alive, fields
    )


class ChunkedDecoder:
    """A request body's chunked decoding (RFC 9112 7.1): `http1.ChunkedBody`, the decoder of
    responses, under this reader's limits and words; trailers are read and dropped."""

    __slots__ = ("_body",)

    def __init__(self) -> None:
        self._body = ChunkedBody(
            max_line=MAX_LINE,
            max_fields=MAX_HEADERS,
            error=BadRequestError,
            problems=_CHUNK_PROBLEMS,
        )

    @property
    def done(self) -> bool:
        return self._body.done

    def feed(self, buffer: bytearray) -> bytes:
        """Decode what `buffer` holds, consuming what the body used (bytes after its last
        chunk stay: the next request); returns the body bytes found."""
        out: list[bytes | memoryview] = []
        used = self._body.feed(bytes(buffer), out)
        body = b"".join(out)
        del buffer[:used]
        return body
