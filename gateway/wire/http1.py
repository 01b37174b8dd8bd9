"""The HTTP/1 limits every response the gateway reads is held to, and the strict reader that
applies them: both outbound paths (the `Fetcher`, whose aiohttp parser gets only the bytes
this reader accepted, and the proxy's upstream client) read with this code and these
numbers, so a response one accepts the other accepts, however its bytes are split across
reads. docs/http1-limits.md has them as one table. Pure: no sockets, no asyncio.
"""

from __future__ import annotations

import re

from gateway.errors import UpstreamError

MAX_LINE = 16 * 1024  # the status line, or one header field line, without its CRLF
MAX_HEADERS = 128  # field lines of one response: its head's and its trailer's together
MAX_HEAD = 64 * 1024  # a whole response head, status line and fields
MAX_CHUNK_LINE = 1024  # a chunk-size line: the size and any chunk extensions
MAX_TRAILER = 16 * 1024  # every trailer field line of a chunked body together
MAX_GZIP_MEMBERS = 64  # gzip members concatenated in one body (decoded by WebFetch only)
# Bytes after the end a response declared (Content-Length, the last chunk) are not read as
# anything: the response ends where it said, and its connection is never used again.

# RFC 9110 5.1 and 5.5, as every reader here spells them (requests' and responses').
TOKEN = _TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
VALUE = _VALUE = rb"[^\x00-\x08\x0a-\x1f\x7f]*"  # no control character but HTAB: no CR, no LF
# Status codes 100-599 (RFC 9110 15: others are invalid).
_STATUS = re.compile(rb"HTTP/1\.([01]) ([1-5][0-9]{2})(?: (%b))?\Z" % _VALUE)
FIELD = re.compile(rb"(%b):(%b)\Z" % (_TOKEN, _VALUE))
# Every field line of a head at once, each as FIELD reads it (a value holds no CR or LF, so
# each line ends at its CRLF): one match per head instead of one per line.
_FIELDS = re.compile(rb"(?:%b:%b\r\n)*%b:%b\Z" % (_TOKEN, _VALUE, _TOKEN, _VALUE))
# The usual head (one under MAX_LINE bytes: no line too long, not too many lines) is read in
# two C calls: the whole of it checked at once, a status line and FIELD lines, then the three
# fields its framing depends on picked out. Its other fields are split only when asked for.
_HEAD = re.compile(
    rb"HTTP/1\.([01]) ([1-5][0-9]{2})(?: (%b))?(?:\r\n%b:%b)*\Z" % (_VALUE, _TOKEN, _VALUE)
)
_FRAMING = re.compile(
    rb"\r\n(content-length|transfer-encoding|connection):([^\r\n]*)", re.IGNORECASE
)
_NO_TOKENS: frozenset[bytes] = frozenset()
_DIGITS = re.compile(rb"[0-9]{1,18}\Z")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}\Z")
# Chunk extensions as RFC 9112 7.1.1 writes them, without the optional white space and with
# ASCII quoted strings: what aiohttp's parser (llhttp) and this reader both accept.
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e]|\\[\t \x21-\x7e])*"'
_EXTENSION = re.compile(rb"(?:;%b(?:=(?:%b|%b))?)*\Z" % (_TOKEN, _TOKEN, _QUOTED))
# A line break that is not CRLF: refused wherever it stands, as soon as it is seen.
_BARE_BREAK = re.compile(rb"(?<!\r)\n|\r(?=[^\n])")

_SIZE, _DATA, _CRLF, _TRAILER, _END = range(5)
LENGTH, CHUNKED, UNTIL_CLOSE = range(3)


class BadResponseError(UpstreamError):
    """The upstream's response cannot be read unambiguously; it is refused, not repaired."""


def unfinished_head_problem(
    buf: bytes | bytearray, scanned: int, *, max_line: int, max_head: int
) -> str | None:
    """Why a head still without its CRLF CRLF is already sure to be refused, else None.
    `scanned`: how much of `buf` an earlier call saw (only the rest, and the line it ends in,
    is looked at again, so a head that arrives byte by byte costs linear time)."""
    if _BARE_BREAK.search(buf, max(0, scanned - 1)):
        return "bare CR or LF in the head; lines end with CRLF"
    if len(buf) > max_head:
        return f"the head is over {max_head} bytes"
    line_start = max(0, buf.rfind(b"\r\n", 0, scanned + 1) + 2)  # the line `scanned` is in
    if max(map(len, buf[line_start:].split(b"\r\n"))) > max_line:
        return f"a line of the head is over {max_line} bytes"
    return None


class ResponseHead:
    """A response head the strict reader accepted. `raw` is the head as received (without its
    blank line), `raw[fields_at:]` its field lines, each after its CRLF; `headers` are those
    lines as (name, value) pairs, values trimmed, split only when asked for."""

    __slots__ = (
        "status",
        "reason",
        "version",
        "content_length",
        "declared_length",
        "chunked",
        "keep_alive",
        "connection_tokens",
        "raw",
        "fields_at",
        "_headers",
    )

    def __init__(
        self,
        *,
        status: int,
        reason: bytes,
        version: str,
        content_length: int | None,
        declared_length: int | None,
        chunked: bool,
        keep_alive: bool,
        connection_tokens: frozenset[bytes],
        raw: bytes,
        fields_at: int,
        headers: tuple[tuple[bytes, bytes], ...] | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.version = version  # "HTTP/1.1" | "HTTP/1.0"
        self.content_length = content_length  # of the body: 0 for a status or method without
        self.declared_length = declared_length  # what the Content-Length field said, if any
        self.chunked = chunked
        self.keep_alive = keep_alive  # the upstream allows another request on this connection
        self.connection_tokens = connection_tokens  # the Connection field's, lower-cased
        self.raw = raw
        self.fields_at = fields_at
        self._headers = headers

    @property
    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        if self._headers is None:
            fields = self.raw[self.fields_at + 2 :].split(b"\r\n") if self.has_fields else []
            pairs = (line.partition(b":") for line in fields)
            self._headers = tuple((name, value.strip(b" \t")) for name, _, value in pairs)
        return self._headers

    @property
    def has_fields(self) -> bool:
        return self.fields_at < len(self.raw)

    @property
    def framing(self) -> int:
        if self.chunked:
            return CHUNKED
        if self.content_length is not None:
            return LENGTH
        return UNTIL_CLOSE


def parse_response_head(raw: bytes, method: str) -> ResponseHead:
    """A response head without its final blank line; raises BadResponseError."""
    if len(raw) <= MAX_LINE:
        status_line = _HEAD.match(raw)
        if status_line is not None and raw.count(b"\r\n") <= MAX_HEADERS:
            lengths: list[bytes] = []
            codings: list[bytes] = []
            options: list[bytes] = []
            for name, value in _FRAMING.findall(raw):
                lower = name.lower()
                value = value.strip(b" \t")
                if lower == b"content-length":
                    lengths.append(value)
                elif lower == b"transfer-encoding":
                    codings.append(value)
                else:
                    options.append(value)
            fields_at = raw.find(b"\r\n")
            fields_at = len(raw) if fields_at < 0 else fields_at
            return _framed(raw, fields_at, status_line, None, lengths, codings, options, method)
    return _any_head(raw, method)


def _any_head(raw: bytes, method: str) -> ResponseHead:
    """Any head, line by line: says which limit or rule it breaks."""
    if len(raw) > MAX_HEAD:
        raise BadResponseError(f"the upstream's response head is over {MAX_HEAD} bytes")
    lines = raw.split(b"\r\n")
    breaks = len(lines) - 1
    if raw.count(b"\r") != breaks or raw.count(b"\n") != breaks:
        raise BadResponseError("bare CR or LF in the upstream's response head")
    if breaks > MAX_HEADERS:
        raise BadResponseError(f"the upstream sent more than {MAX_HEADERS} header fields")
    if len(lines[0]) > MAX_LINE:
        raise BadResponseError(f"the upstream's status line is over {MAX_LINE} bytes")
    status_line = _STATUS.match(lines[0])
    if status_line is None:
        raise BadResponseError("the upstream's status line is not HTTP/1.x NNN reason")
    headers = []
    lengths: list[bytes] = []
    codings: list[bytes] = []
    options: list[bytes] = []
    if breaks and _FIELDS.match(raw, len(lines[0]) + 2) is None:
        _refuse_fields(lines)  # raises, saying which line and why
    for line in lines[1:]:
        if len(line) > MAX_LINE:
            raise BadResponseError(f"an upstream header field is over {MAX_LINE} bytes")
        # Every line matched FIELD (checked above, all at once): NAME up to the first colon.
        name, _, value = line.partition(b":")
        value = value.strip(b" \t")
        headers.append((name, value))
        if len(name) in (10, 14, 17):
            lower = name.lower()
            if lower == b"content-length":
                lengths.append(value)
            elif lower == b"transfer-encoding":
                codings.append(value)
            elif lower == b"connection":
                options.append(value)
    fields = tuple(headers)
    return _framed(raw, len(lines[0]), status_line, fields, lengths, codings, options, method)


class FramingError(ValueError):
    """A head's Content-Length and Transfer-Encoding do not frame its body unambiguously;
    `kind` says how (one of the *_FRAMING names), each reader words it for its peer."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


BOTH_FRAMINGS, LENGTH_REPEATED, LENGTH_NOT_DECIMAL, CODING_NOT_CHUNKED = (
    "both",
    "length_repeated",
    "length_not_decimal",
    "coding_not_chunked",
)


def body_framing(lengths: list[bytes], codings: list[bytes]) -> tuple[int | None, bool]:
    """The body framing (Content-Length, chunked) of a head's Content-Length and
    Transfer-Encoding values, for requests and responses alike (RFC 9112 6): both present,
    a repeated or non-decimal length, or any coding but a lone `chunked` raise FramingError."""
    if lengths and codings:
        raise FramingError(BOTH_FRAMINGS)
    content_length = None
    if lengths:
        if len(lengths) > 1:
            raise FramingError(LENGTH_REPEATED)
        if not _DIGITS.match(lengths[0]):
            raise FramingError(LENGTH_NOT_DECIMAL)
        content_length = int(lengths[0])
    chunked = False
    if codings:
        if [c.strip().lower() for c in b",".join(codings).split(b",")] != [b"chunked"]:
            raise FramingError(CODING_NOT_CHUNKED)
        chunked = True
    return content_length, chunked


_RESPONSE_FRAMING_PROBLEMS = {
    BOTH_FRAMINGS: "the upstream sent both Content-Length and Transfer-Encoding",
    LENGTH_REPEATED: "the upstream repeated Content-Length",
    LENGTH_NOT_DECIMAL: "the upstream's Content-Length is not a decimal number",
    CODING_NOT_CHUNKED: "the upstream used a transfer coding other than chunked",
}


def _framed(
    raw: bytes,
    fields_at: int,
    status_line: re.Match[bytes],
    headers: tuple[tuple[bytes, bytes], ...] | None,
    lengths: list[bytes],
    codings: list[bytes],
    options: list[bytes],
    method: str,
) -> ResponseHead:
    """The head, framed by its Content-Length, Transfer-Encoding and Connection values."""
    version = "HTTP/1.1" if status_line[1] == b"1" else "HTTP/1.0"
    status = int(status_line[2])
    try:
        content_length, chunked = body_framing(lengths, codings)
    except FramingError as exc:
        raise BadResponseError(_RESPONSE_FRAMING_PROBLEMS[exc.kind]) from None
    declared_length = content_length
    if not options:
        tokens = _NO_TOKENS
    elif len(options) == 1 and b"," not in options[0]:  # the usual `keep-alive` or `close`
        tokens = frozenset((options[0].lower(),))
    else:
        tokens = frozenset(t.strip().lower() for v in options for t in v.split(b","))
    keep_alive = version == "HTTP/1.1" and b"close" not in tokens
    if not has_body(method, status):
        content_length, chunked = 0, False
    elif content_length is None and not chunked:
        keep_alive = False  # the body ends when the connection does
    return ResponseHead(
        status=status,
        reason=status_line[3] or b"",
        version=version,
        content_length=content_length,
        declared_length=declared_length,
        chunked=chunked,
        keep_alive=keep_alive,
        connection_tokens=tokens,
        raw=raw,
        fields_at=fields_at,
        headers=headers,
    )


def _refuse_fields(lines: list[bytes]) -> None:
    """Why a head's field lines do not all match FIELD, line by line."""
    for line in lines[1:]:
        if FIELD.match(line) is None:
            if line[:1] in (b" ", b"\t"):
                raise BadResponseError("obs-fold in the upstream's response head")
            raise BadResponseError("an upstream header line is not NAME: VALUE")
    raise AssertionError("every field line matches")  # pragma: no cover - _FIELDS is FIELD's


def has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status not in (204, 304) and not 100 <= status < 200


# What a chunked body can get wrong, in the words of a response's refusal (a request's
# reader words them for its peer: wire/request.py).
(
    CHUNK_NO_CRLF,
    CHUNK_LINE_TOO_LONG,
    CHUNK_LINE_BREAK,
    CHUNK_SIZE,
    CHUNK_EXTENSION,
    CHUNK_TRAILER,
    CHUNK_FIELDS,
) = range(7)
RESPONSE_CHUNK_PROBLEMS = {
    CHUNK_NO_CRLF: "an upstream chunk is not followed by CRLF",
    CHUNK_LINE_TOO_LONG: "an upstream chunk-size or trailer line is too long",
    CHUNK_LINE_BREAK: "an upstream chunk line does not end with CRLF",
    CHUNK_SIZE: "an upstream chunk size is not a hexadecimal number",
    CHUNK_EXTENSION: "an upstream chunk extension is malformed",
    CHUNK_TRAILER: "the upstream's chunked trailer is malformed",
    CHUNK_FIELDS: f"the upstream sent more than {MAX_HEADERS} header and trailer fields",
}


class ChunkedBody:
    """Strict, incremental chunked decoding (RFC 9112 7.1) under the limits; trailers are
    checked and dropped. `rechunk`: the output keeps the chunks as the upstream cut them
    (each size line written afresh, extensions and trailers never forwarded). `fields`: the
    field lines the head had (trailer fields count against the same `max_fields`). The
    request reader decodes with it too, under its own limits, error and words."""

    __slots__ = (
        "state",
        "left",
        "line",
        "trailer",
        "rechunk",
        "fields",
        "data",
        "max_line",
        "max_fields",
        "error",
        "problems",
    )

    def __init__(
        self,
        *,
        rechunk: bool = False,
        fields: int = 0,
        max_line: int = MAX_LINE,
        max_fields: int = MAX_HEADERS,
        error: type[Exception] = BadResponseError,
        problems: dict[int, str] = RESPONSE_CHUNK_PROBLEMS,
    ) -> None:
        self.rechunk = rechunk
        self.fields = fields
        self.max_line = max_line
        self.max_fields = max_fields
        self.error = error
        self.problems = problems
        self.state = _SIZE
        self.left = 0
        self.data = 0  # chunk data bytes so far (the body, without its framing)
        self.line = bytearray()
        self.trailer = 0

    @property
    def done(self) -> bool:
        return self.state == _END

    def feed(self, data: bytes, out: list[bytes | memoryview], start: int = 0) -> int:
        """Append the chunk data in `data[start:]` to `out` (views of `data`, with the chunk
        framing when rechunking); return how many of those bytes the body used: all of them,
        or fewer once its last chunk has ended."""
        rechunk = self.rechunk
        view = memoryview(data)
        pos, size = start, len(data)
        line = self.line
        while pos < size and self.state != _END:
            state = self.state
            if state == _DATA:
                take = min(self.left, size - pos)
                out.append(view[pos : pos + take])
                pos += take
                self.left -= take
                self.data += take
                if self.left == 0:
                    self.state = _CRLF
                continue
            if state == _CRLF:
                need = 2 - len(line)
                line += view[pos : pos + need]
                pos += min(need, size - pos)
                if len(line) < 2:
                    break
                if line != b"\r\n":
                    raise self.error(self.problems[CHUNK_NO_CRLF])
                line.clear()
                self.state = _SIZE
                if rechunk:
                    out.append(b"\r\n")
                continue
            end = data.find(b"\n", pos)
            stop = end + 1 if end >= 0 else size
            line += view[pos:stop]
            pos = stop
            limit = MAX_CHUNK_LINE + 2 if state == _SIZE else self.max_line + 2
            if len(line) > limit:
                raise self.error(self.problems[CHUNK_LINE_TOO_LONG])
            if end < 0:
                break
            text = bytes(line)
            line.clear()
            if not text.endswith(b"\r\n") or b"\r" in text[:-2]:
                raise self.error(self.problems[CHUNK_LINE_BREAK])
            text = text[:-2]
            if state == _SIZE:
                semicolon = text.find(b";")
                length = text if semicolon < 0 else text[:semicolon]
                extension = b"" if semicolon < 0 else text[semicolon:]
                if not _HEX.match(length):
                    raise self.error(self.problems[CHUNK_SIZE])
                if not _EXTENSION.match(extension):
                    raise self.error(self.problems[CHUNK_EXTENSION])
                self.left = int(length, 16)
                self.state = _DATA if self.left else _TRAILER
                if rechunk and self.left:
                    out.append(b"%x\r\n" % self.left)
            elif text:
                self.trailer += len(text) + 2
                self.fields += 1
                if self.trailer > MAX_TRAILER or FIELD.match(text) is None:
                    raise self.error(self.problems[CHUNK_TRAILER])
                if self.fields > self.max_fields:
                    raise self.error(self.problems[CHUNK_FIELDS])
            else:
                self.state = _END
                if rechunk:
                    out.append(b"0\r\n\r\n")
        return pos - start


class HeadReader:
    """Reads one exchange's response head as its bytes arrive: interim (1xx) heads skipped,
    a head sure to be refused refused at once, not when (or if) its blank line comes."""

    __slots__ = ("method", "held", "scanned", "used")

    def __init__(self, method: str) -> None:
        self.method = method
        self.held = bytearray()  # an unfinished head from earlier reads
        self.scanned = 0  # how much of it was looked at
        self.used = 0  # once the final head is read: how many bytes of the last read it took

    def feed(self, data: bytes) -> ResponseHead | None:
        """The final head once it is whole (`data[self.used:]` is what followed it), else
        None; raises BadResponseError."""
        held = len(self.held)
        if held:  # a head split across reads (the usual head comes in one)
            self.held += data
            text = bytes(self.held)
            self.held.clear()
        else:
            text = data
        pos = 0
        while True:
            end = text.find(b"\r\n\r\n", pos + max(0, self.scanned - 3))
            if end < 0:
                rest = text[pos:]
                problem = unfinished_head_problem(
                    rest, self.scanned, max_line=MAX_LINE, max_head=MAX_HEAD
                )
                if problem is not None:
                    raise BadResponseError(f"the upstream's response is refused: {problem}")
                self.held += rest
                self.scanned = len(rest)
                return None
            head = parse_response_head(text[pos:end], self.method)
            pos = end + 4
            self.scanned = 0
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise BadResponseError("the upstream switched protocols unasked")
                continue  # an interim response: the final one follows
            self.used = pos - held
            return head


class ResponseFraming:
    """Where each response on one connection ends, read strictly: the head by `HeadReader`,
    then the body counted (Content-Length), decoded (chunked) or read until the close. Feed
    it every byte the connection receives; `feed` returns the bytes a second parser may now
    read: whole heads and whole chunk lines only, never past the response's end, so the
    second parser never sees a line this reader has not accepted."""

    __slots__ = ("method", "heads", "framing", "left", "chunks", "held", "spoiled")

    def __init__(self) -> None:
        self.method: str | None = None  # the request whose response is still being read
        self.heads: HeadReader | None = None  # while its head is
        self.framing = UNTIL_CLOSE
        self.left = 0
        self.chunks: ChunkedBody | None = None
        self.held = bytearray()  # received, not yet passed on: an unfinished head or line
        self.spoiled = False  # the upstream sent past an end: never reuse the connection

    def expect(self, method: str) -> None:
        """A request was sent: its response comes next."""
        self.method = method
        self.heads = HeadReader(method)
        self.held.clear()

    def feed(self, data: bytes) -> bytes:
        """What of `data` (and of what was held back before) may now be parsed; raises
        BadResponseError for a response refused. Bytes past its end set `spoiled`."""
        if self.method is None:
            if data:
                self.spoiled = True
            return b""
        start = 0
        heads = self.heads
        if heads is not None:
            head = heads.feed(data)
            if head is None:
                self.held += data
                return b""
            start = heads.used
            self.heads = None
            self.framing, self.left = head.framing, head.content_length or 0
            self.chunks = ChunkedBody(fields=len(head.headers)) if head.chunked else None
        end = start + self._feed_body(data, start)
        if end < len(data):
            self.spoiled = True
        unsettled = len(self.chunks.line) if self.chunks is not None else 0
        held = self.held
        if not held and not unsettled:  # the usual read: whole lines, nothing held
            return data if end == len(data) else data[:end]
        held += memoryview(data)[:end]
        settled = len(held) - unsettled
        out = bytes(held[:settled])
        del held[:settled]
        return out

    def _feed_body(self, data: bytes, start: int) -> int:
        if self.framing == UNTIL_CLOSE:
            return len(data) - start
        if self.chunks is not None:
            used = self.chunks.feed(data, [], start)
            if self.chunks.done:
                self.method = None
            return used
        take = min(self.left, len(data) - start)
        self.left -= take
        if self.left == 0:
            self.method = None
        return take
