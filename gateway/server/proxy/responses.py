"""The bytes the forward proxy writes to a client that are not relayed: its own plain-text
answers (with the X-Gateway-* headers) and an upstream's response head, re-framed for the
client. Pure: no sockets, no asyncio, no audit.
"""

from __future__ import annotations

import functools
import re

from gateway.wire.http1 import ResponseHead, has_body
from gateway.wire.request import RequestHead

# Response headers that describe one hop, never forwarded (RFC 9110 7.6.1).
RESPONSE_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
REASON_PHRASES = {
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    408: "Request Timeout",
    413: "Content Too Large",
    429: "Too Many Requests",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def one_line(text: str, limit: int = 400) -> str:
    return "".join(c if c.isprintable() else " " for c in text)[:limit]


# What to do with an upstream header, by its name as sent: forward it or drop it (hop-by-hop,
# X-Gateway-*). Names repeat from response to response, so each is lower-cased and judged
# once (bounded: past the cap, names are judged every time).
_FORWARD, _DROP = range(2)
_NAMES: dict[bytes, tuple[int, bytes]] = {}
_MAX_NAMES = 4096


def _judge_name(name: bytes) -> tuple[int, bytes]:
    lower = name.lower()
    judged = (
        _DROP if lower in RESPONSE_HOP_BY_HOP or lower.startswith(b"x-gateway-") else _FORWARD,
        lower,
    )
    if len(_NAMES) < _MAX_NAMES:
        _NAMES[name] = judged
    return judged


# The field lines never forwarded, each with the CRLF before it: what `_judge_name` drops.
_DROPPED_LINES = re.compile(
    rb"\r\n(?:%b|x-gateway-[!#$%%&'*+\-.^_`|~0-9A-Za-z]*):[^\r\n]*"
    % b"|".join(re.escape(name) for name in sorted(RESPONSE_HOP_BY_HOP)),
    re.IGNORECASE,
)


def response_head(
    response: ResponseHead, head: RequestHead
) -> tuple[bytes, bool, bool, int | None]:
    """The response head for the client: hop-by-hop and X-Gateway-* headers removed, and
    framing chosen (the upstream's Content-Length, else chunked, else close-delimited).
    `response` was read by the strict reader: at most one Content-Length, and never one
    beside a Transfer-Encoding."""
    parts = [b"HTTP/1.1 %d %b" % (response.status, _reason_phrase(response.reason))]
    append = parts.append
    named = response.connection_tokens - RESPONSE_HOP_BY_HOP  # most often nothing is left
    if named:  # the Connection field names end-to-end fields too: judged one by one
        for name, value in response.headers:
            action, lower = _NAMES.get(name) or _judge_name(name)
            if action != _DROP and lower not in named:
                append(b"\r\n%b: %b" % (name, value))
    elif response.has_fields:  # the field lines as they came, less those never forwarded
        append(_DROPPED_LINES.sub(b"", response.raw[response.fields_at :]))
    append(b"\r\n")
    length = response.declared_length
    keep_alive = head.keep_alive
    chunked = False
    if length is None and has_body(head.method, response.status):
        if head.version == "HTTP/1.1":
            chunked = True
            append(b"Transfer-Encoding: chunked\r\n")
        else:
            keep_alive = False
    if not keep_alive:
        append(b"Connection: close\r\n")
    elif head.version == "HTTP/1.0":
        append(b"Connection: keep-alive\r\n")
    append(b"\r\n")
    return b"".join(parts), keep_alive, chunked, length


@functools.lru_cache(maxsize=64)  # the usual few phrases, cleaned once
def _reason_phrase(reason: bytes) -> bytes:
    return bytes(b for b in reason if 0x20 <= b < 0x7F or b == 0x09)[:100] or b"-"


def plain_response(
    status: int,
    reason: str,
    rule: str | None,
    message: str,
    *,
    keep_alive: bool,
    request_id: str,
    version: str = "HTTP/1.1",
    extra: tuple[tuple[str, str], ...] = (),
) -> bytes:
    body = (one_line(message) + "\n").encode("utf-8")
    lines = [
        f"HTTP/1.1 {status} {REASON_PHRASES.get(status, 'Error')}",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
        f"X-Gateway-Reason: {reason}",
    ]
    if rule is not None:
        lines.append(f"X-Gateway-Rule: {one_line(rule, 200)}")
    lines.append(f"X-Gateway-Request-Id: {request_id}")
    lines.extend(f"{name}: {value}" for name, value in extra)
    if not keep_alive:
        lines.append("Connection: close")
    elif version == "HTTP/1.0":
        lines.append("Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body
