"""The provider transport: only the base_url's origin, no redirects, 5 MiB, allow_private.

A real `Fetcher` with a static resolver sends to loopback fakes; the provider names map to
127.0.0.1 (private: allowed only with allow_private) or to the metadata address (never).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import orjson
import pytest
from aiohttp import web

from gateway.errors import (
    PolicyDeniedError,
    ResponseTooLargeError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.fetch.client import Fetcher
from gateway.fetch.provider import (
    MAX_PROVIDER_RESPONSE_BYTES,
    FetcherProviderTransport,
    ProviderEndpoint,
    endpoint_policy,
)
from gateway.fetch.resolver import parse_static_hosts
from gateway.search.chain import ConfiguredProvider, SearchEngine
from gateway.search.health import InMemoryHealthStore
from gateway.search.providers import ADAPTERS
from gateway.search.query import SearchQuery

HOSTS = {
    "provider.example": ["127.0.0.1"],
    "other.example": ["127.0.0.1"],
    "metadata.example": ["169.254.169.254"],
}


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None


@pytest.fixture
async def provider(aiohttp_server):
    seen: list[web.Request] = []

    async def handle(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        body = await request.read()
        path = request.path
        if path == "/redirect":
            return web.Response(status=302, headers={"Location": "http://other.example/x"})
        if path == "/big":
            return web.Response(body=b"x" * (MAX_PROVIDER_RESPONSE_BYTES + 1))
        if path == "/image":
            return web.Response(body=b"\x89PNG", content_type="image/png")
        if path.startswith("/slow"):
            await asyncio.sleep(2)
        if path == "/limited":
            return web.json_response({"error": "slow down"}, status=429)
        return web.json_response(
            {
                "method": request.method,
                "key": request.headers.get("X-Api-Key"),
                "body": body.decode(),
            }
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = await aiohttp_server(app, host="127.0.0.1")
    server.seen = seen
    return server


@pytest.fixture
async def fetcher():
    client = Fetcher(static_hosts=parse_static_hosts(HOSTS))
    yield client
    await client.close()


def transport_for(fetcher, port: int, *, allow_private: bool = True, host="provider.example"):
    endpoint = ProviderEndpoint(f"http://{host}:{port}/api", allow_private)
    return FetcherProviderTransport(fetcher, [endpoint], timeout=1.0)


async def test_sends_operator_headers_and_body_and_returns_any_status(fetcher, provider) -> None:
    transport = transport_for(fetcher, provider.port)
    url = f"http://provider.example:{provider.port}/api/search"
    reply = await transport.send(
        Request("POST", url, {"X-Api-Key": "k-123456"}, b'{"q": 1}'), timeout=1, allow_private=True
    )
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("application/json")
    assert orjson.loads(reply.body) == {"method": "POST", "key": "k-123456", "body": '{"q": 1}'}
    limited = await transport.send(
        Request("GET", f"http://provider.example:{provider.port}/limited"),
        timeout=1,
        allow_private=True,
    )
    assert limited.status == 429  # a provider's error is the adapter's to read


async def test_redirects_are_returned_not_followed(fetcher, provider) -> None:
    transport = transport_for(fetcher, provider.port)
    reply = await transport.send(
        Request("GET", f"http://provider.example:{provider.port}/redirect"),
        timeout=1,
        allow_private=True,
    )
    assert reply.status == 302 and reply.headers["Location"] == "http://other.example/x"
    assert [r.path for r in provider.seen] == ["/redirect"]


async def test_content_type_is_not_checked(fetcher, provider) -> None:
    transport = transport_for(fetcher, provider.port)
    reply = await transport.send(
        Request("GET", f"http://provider.example:{provider.port}/image"),
        timeout=1,
        allow_private=True,
    )
    assert reply.body == b"\x89PNG"


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://other.example:{port}/api", id="other-host"),
        pytest.param("http://provider.example:1/api", id="other-port"),
        pytest.param("https://provider.example:{port}/api", id="other-scheme"),
        pytest.param("http://127.0.0.1:{port}/api", id="its-address-literal"),
    ],
)
async def test_only_the_base_url_origin_is_reached(fetcher, provider, url) -> None:
    transport = transport_for(fetcher, provider.port)
    with pytest.raises(PolicyDeniedError, match="outside the provider's configured base_url"):
        await transport.send(
            Request("GET", url.format(port=provider.port)), timeout=1, allow_private=True
        )
    assert provider.seen == []


async def test_private_address_needs_allow_private(fetcher, provider) -> None:
    transport = transport_for(fetcher, provider.port, allow_private=False)
    url = f"http://provider.example:{provider.port}/api"
    with pytest.raises(PolicyDeniedError) as caught:
        await transport.send(Request("GET", url), timeout=1, allow_private=False)
    assert (caught.value.reason, caught.value.rule) == ("private_address", "networks.block_private")
    # The flag on the call must match what the operator configured for that endpoint.
    with pytest.raises(PolicyDeniedError, match="outside"):
        await transport.send(Request("GET", url), timeout=1, allow_private=True)
    assert provider.seen == []


async def test_metadata_address_is_refused_even_with_allow_private(fetcher) -> None:
    transport = transport_for(fetcher, 80, host="metadata.example")
    with pytest.raises(PolicyDeniedError) as caught:
        await transport.send(
            Request("GET", "http://metadata.example/api"), timeout=1, allow_private=True
        )
    assert caught.value.reason == "metadata_address"


@pytest.mark.parametrize(
    ("base_url", "allow_private", "works"),
    [
        pytest.param("http://127.0.0.1:{port}", True, True, id="loopback-allowed"),
        pytest.param("http://127.0.0.1:{port}", False, False, id="loopback-refused"),
        pytest.param("http://169.254.169.254", True, None, id="metadata-never"),
    ],
)
async def test_ip_literal_base_urls(fetcher, provider, base_url, allow_private, works) -> None:
    endpoint = ProviderEndpoint(base_url.format(port=provider.port), allow_private)
    if works is False:
        with pytest.raises(ValueError, match="allow_private"):
            FetcherProviderTransport(fetcher, [endpoint])
        return
    transport = FetcherProviderTransport(fetcher, [endpoint])
    url = endpoint.base_url + "/search"
    if works:
        reply = await transport.send(Request("GET", url), timeout=1, allow_private=allow_private)
        assert reply.status == 200
    else:
        with pytest.raises(PolicyDeniedError) as caught:
            await transport.send(Request("GET", url), timeout=1, allow_private=allow_private)
        assert caught.value.reason == "metadata_address"


async def test_response_cap_and_timeout(fetcher, provider) -> None:
    transport = transport_for(fetcher, provider.port)
    with pytest.raises(ResponseTooLargeError):
        await transport.send(
            Request("GET", f"http://provider.example:{provider.port}/big"),
            timeout=1,
            allow_private=True,
        )
    with pytest.raises(UpstreamTimeoutError):
        await transport.send(
            Request("GET", f"http://provider.example:{provider.port}/slow"),
            timeout=0.3,
            allow_private=True,
        )


@pytest.mark.parametrize(
    "base_url",
    [
        pytest.param("ftp://provider.example", id="scheme"),
        pytest.param("provider.example", id="no-scheme"),
        pytest.param("http://user:pw@provider.example", id="userinfo"),
    ],
)
def test_unusable_base_urls_fail_at_start(base_url) -> None:
    with pytest.raises(ValueError, match="base_url"):
        endpoint_policy(ProviderEndpoint(base_url), 10.0)


def test_endpoint_policy_reaches_only_its_origin() -> None:
    policy = endpoint_policy(ProviderEndpoint("https://api.search.brave.com/res"), 7.0)
    assert policy.schemes == ("https",) and policy.ports == (443,)
    assert [r.pattern.domain for r in policy.domain_allow] == ["api.search.brave.com"]
    assert policy.block_private is True and policy.max_redirects == 0
    assert policy.limits.max_response_bytes == MAX_PROVIDER_RESPONSE_BYTES
    assert policy.timeouts.total == 7.0
    assert not any(settings.enabled for settings in policy.tools.values())


async def test_chain_classifies_transport_failures(fetcher, provider) -> None:
    """Through the real chain: a refused private address is [network], a stall [timeout]."""
    base = f"http://provider.example:{provider.port}"
    transport = FetcherProviderTransport(
        fetcher, [ProviderEndpoint(base, False), ProviderEndpoint(base + "/slow", True)]
    )
    providers = [
        ConfiguredProvider("locked", ADAPTERS["searxng"], base),
        ConfiguredProvider("stalled", ADAPTERS["searxng"], base + "/slow", allow_private=True),
    ]

    async def no_sleep(_: float) -> None:
        return None

    engine = SearchEngine(
        providers,
        transport,
        health=InMemoryHealthStore(lambda: 0.0),
        timeout=0.3,
        deadline=5,
        sleep=no_sleep,
    )
    with pytest.raises(UpstreamError) as caught:
        await engine.search(SearchQuery("q"))
    message = caught.value.message
    assert "locked: [network] policy_denied" in message and "private" in message
    assert "stalled: [timeout]" in message
