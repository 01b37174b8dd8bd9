"""Class: a body on GET, through the forward proxy end to end. Methods are case-sensitive
tokens (RFC 9110 9.1): only the exact token `methods` allows passes and is forwarded as
written; `get` or `Head` (with or without a 100 KB body) is refused with
`method_not_allowed`, on record, and never reaches the upstream."""

from __future__ import annotations

import pytest

from tests.server.proxy.env import parse_head, raw_exchange, start_env
from tests.upstream import ScriptedUpstream

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
BODY = b"b" * 100_000


def request(method: str, port: int, body: bytes = b"") -> bytes:
    head = (
        f"{method} http://site.example.com:{port}/upload HTTP/1.1\r\n"
        f"Host: site.example.com:{port}\r\nConnection: close\r\n"
    )
    if body:
        head += f"Content-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


# (method as sent, with a body?, the status, the reason on record or None)
CASES = [
    ("GET", False, 200, None),
    ("HEAD", False, 200, None),
    ("POST", True, 200, None),
    ("get", False, 403, "method_not_allowed"),
    ("Get", False, 403, "method_not_allowed"),
    ("head", False, 403, "method_not_allowed"),
    ("Head", False, 403, "method_not_allowed"),
    ("post", True, 403, "method_not_allowed"),
    ("Post", True, 403, "method_not_allowed"),
    ("get", True, 403, "method_not_allowed"),
    ("Head", True, 403, "method_not_allowed"),
    ("GET", True, 400, None),  # framing: a GET never carries a body
    ("HEAD", True, 400, None),
    ("PUT", True, 403, "method_not_allowed"),  # not in methods in any case
    ("put", True, 403, "method_not_allowed"),
]


@pytest.mark.parametrize(
    ("method", "with_body", "status", "reason"),
    CASES,
    ids=[f"{m}-{'body' if b else 'nobody'}" for m, b, _, _ in CASES],
)
async def test_only_the_exact_method_token_passes(
    tmp_path, make_config, method, with_body, status, reason
) -> None:
    upstream = ScriptedUpstream([OK], repeat=True)
    port = await upstream.start()
    env = await start_env(tmp_path, make_config, extra_ports=(port,))
    try:
        raw = await raw_exchange(env.port, request(method, port, BODY if with_body else b""))
        got, headers, _ = parse_head(raw)
        assert got == status, raw[:300]
        (record,) = env.records("proxy_http")
        assert record["http"]["request"]["method"] == method
        if status == 200:
            (sent,) = upstream.requests  # forwarded exactly as allowed
            assert sent.startswith(f"{method} /upload HTTP/1.1\r\n".encode())
            assert record["policy"]["decision"] == "allow"
            return
        assert upstream.requests == [], "a refused request never reaches the upstream"
        if reason is not None:
            assert headers["x-gateway-reason"] == reason
            assert headers["x-gateway-rule"] == "methods"
            assert record["policy"]["reason"] == reason and record["policy"]["rule"] == "methods"
        else:
            assert headers["x-gateway-reason"] == "bad_request"
    finally:
        await env.close()
        await upstream.close()
