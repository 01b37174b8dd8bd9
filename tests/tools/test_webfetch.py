"""The WebFetch use case, called as the adapters call it (no HTTP in front): decide, fetch,
extract, wrap, audit, in that order. A real gateway's services, a hostile upstream on
loopback, the audit file read back. The HTTP API's own shapes are tests/server/test_api_fetch.py's.
"""

from __future__ import annotations

import hashlib
import http.server
import threading
from typing import Any

import orjson
import pytest

from gateway.errors import InvalidRequestError, PolicyDeniedError
from gateway.provenance.markers import unwrap
from gateway.runtime import Services
from gateway.tools.context import CallContext
from gateway.tools.webfetch import FetchCache, render_text, tool_spec
from tests.conftest import loopback_policy
from tests.upstream import PAGE


@pytest.fixture
async def services(upstream: Any, write_policy: Any, make_config: Any):
    svc = Services(make_config(write_policy(loopback_policy(upstream.port))))
    svc.open()
    yield svc
    await svc.close()


def records(services: Services) -> list[dict[str, Any]]:
    with open(services.audit.path, "rb") as handle:
        lines = [orjson.loads(line) for line in handle if line.strip()]
    return [r for r in lines if r["event"]["action"] == "WebFetch"]


def context(services: Services) -> CallContext:
    return CallContext(policy=services.state.default_policy)


async def test_a_page_comes_back_wrapped_hashed_and_already_on_record(
    services: Services, upstream: Any
) -> None:
    url = f"http://site.example.com:{upstream.port}/page"
    body = await services.webfetch.call(context(services), {"url": url})
    # The record is written before the answer is returned (fail closed on the audit log).
    (record,) = records(services)
    envelope = body["envelope"]
    text = unwrap(body["content"], envelope["marker"])
    assert "# Hello" in text
    assert envelope["content_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert envelope["body_sha256"] == hashlib.sha256(PAGE).hexdigest() == record["hash"]["sha256"]
    assert record["policy"]["decision"] == "allow"


async def test_a_refused_url_is_one_deny_record_and_no_fetch(
    services: Services, upstream: Any
) -> None:
    url = f"http://blocked.example.com:{upstream.port}/page"
    with pytest.raises(PolicyDeniedError) as caught:
        await services.webfetch.call(context(services), {"url": url})
    assert caught.value.decision.rule == "domains.deny[0]"
    (record,) = records(services)
    assert record["policy"]["decision"] == "deny" and "hash" not in record


async def test_arguments_are_validated_before_anything_else(services: Services) -> None:
    with pytest.raises(InvalidRequestError):
        await services.webfetch.call(context(services), {"url": 7})
    assert records(services) == []


async def test_a_window_of_the_text_is_cut_where_asked(services: Services, upstream: Any) -> None:
    url = f"http://site.example.com:{upstream.port}/page"
    ctx = context(services)
    whole = await services.webfetch.call(ctx, {"url": url})
    part = await services.webfetch.call(ctx, {"url": url, "start_index": 2, "max_chars": 5})
    full = unwrap(whole["content"], whole["envelope"]["marker"])
    assert unwrap(part["content"], part["envelope"]["marker"]) == full[2:7]
    assert part["envelope"]["start_index"] == 2 and part["envelope"]["chars"] == 5


def test_the_spec_names_the_tool_and_its_route(services: Services) -> None:
    spec = tool_spec(services.webfetch)
    assert (spec.name, spec.path) == ("WebFetch", "/v1/fetch")
    assert spec.call == services.webfetch.call and spec.render_text is render_text
    assert services.tools.at_path("/v1/fetch") is not None


def test_the_page_cache_is_off_at_ttl_zero_and_expires() -> None:
    now = [0.0]
    cache = FetchCache(10, clock=lambda: now[0])
    page: Any = object()
    cache.put(("p", "u", "auto"), page)
    assert cache.get(("p", "u", "auto")) is page
    now[0] = 11
    assert cache.get(("p", "u", "auto")) is None
    off = FetchCache(0)
    off.put(("k",), page)
    assert off.get(("k",)) is None


class _ClosingHandler(http.server.BaseHTTPRequestHandler):
    """The standard library's server: HTTP/1.0, the connection closed after each answer."""

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        body = b"closing page " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def closing_upstream():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ClosingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


async def test_destination_ip_is_the_address_dialled_even_when_the_upstream_closed(
    closing_upstream: int, write_policy: Any, make_config: Any
) -> None:
    """Class: `destination.ip` is null. An upstream that closes right after its answer (the
    connection is gone before the record is built) still has its address on record."""
    svc = Services(make_config(write_policy(loopback_policy(closing_upstream))))
    svc.open()
    try:
        for n in range(40):
            url = f"http://site.example.com:{closing_upstream}/n{n}"
            await svc.webfetch.call(context(svc), {"url": url})
        ips = [record["destination"]["ip"] for record in records(svc)]
    finally:
        await svc.close()
    assert ips == ["127.0.0.1"] * 40
