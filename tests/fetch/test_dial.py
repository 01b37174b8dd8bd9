"""The socket choke point: an address that got past every check above the socket is still
refused at dial time, on every outbound path, before a single packet.

The fault is injected above the socket, never into it: `checks_bypassed` makes the address
checks of the resolver, the Fetcher and the tunnel opener allow everything (as a parser or
resolver bug would), and `unchecked_target` builds a Target whose host is an IP literal the
policy never classified (as a parser that missed a spelling would). The listener each test
points at counts its connections; it must see none.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
import yarl

from gateway.errors import PolicyDeniedError, UpstreamUnreachableError
from gateway.fetch import client as client_module
from gateway.fetch import resolver as resolver_module
from gateway.fetch import tunnel as tunnel_module
from gateway.fetch.client import Fetcher, FetchOptions, FetchTrace
from gateway.fetch.dial import SocketGuard, SocketRefusedError, dial
from gateway.fetch.provider import FetcherProviderTransport, ProviderEndpoint
from gateway.fetch.resolver import parse_static_hosts
from gateway.fetch.tunnel import open_tunnel
from gateway.fetch.upstream import UpstreamPool
from gateway.policy.engine import Decision, Reason
from gateway.policy.model import Action, Timeouts
from gateway.policy.urls import Target, parse_url
from gateway.search.transport import ProviderRequest
from tests.policy.conftest import make_policy


class CountingListener:
    """A TCP listener on loopback that answers any request with a small 200 and counts the
    connections it accepted."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1") -> int:
        self.server = await asyncio.start_server(self._serve, host, 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def listener():
    counting = CountingListener()
    yield counting
    await counting.close()


def _allow_everything(policy, port, addresses, *, own_addresses=()) -> Decision:
    return Decision(True, None, "injected-fault", policy.name, policy.sha256)


@pytest.fixture
def checks_bypassed(monkeypatch):
    """Every address check above the socket allows everything (a fault, injected)."""
    for module in (resolver_module, client_module, tunnel_module):
        monkeypatch.setattr(module, "decide_answer", _allow_everything)


def unchecked_target(host: str, port: int) -> Target:
    """A Target whose host is an IP literal the parser failed to recognise (`ip` unset)."""
    return Target(url=yarl.URL(f"http://{host}:{port}/"), scheme="http", host=host, port=port)


# A policy under which loopback is private (no networks.allow), names under .example.com allowed.
def strict_policy(port: int):
    return make_policy(
        allow=[".example.com"],
        ports=(80, 443, port),
        timeouts=Timeouts(connect=2, read=2, total=3),
    )


HOSTS = parse_static_hosts({"site.example.com": ["127.0.0.1"]})


def assert_refused_as_private(exc: pytest.ExceptionInfo[PolicyDeniedError]) -> None:
    decision = exc.value.decision
    assert decision is not None
    assert (decision.allowed, decision.reason, decision.rule) == (
        False,
        Reason.PRIVATE_ADDRESS,
        "networks.block_private",
    )


# --- the guard itself -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason", "rule"),
    [
        ("127.0.0.1", Reason.PRIVATE_ADDRESS, "networks.block_private"),
        ("10.0.0.1", Reason.PRIVATE_ADDRESS, "networks.block_private"),
        ("169.254.169.254", Reason.METADATA_ADDRESS, "networks.metadata"),
        ("fd00:ec2::254", Reason.METADATA_ADDRESS, "networks.metadata"),
        ("::ffff:127.0.0.1", Reason.PRIVATE_ADDRESS, "networks.block_private"),
        ("fe80::1%lo", Reason.PRIVATE_ADDRESS, "networks.block_private"),
        ("not-an-address", Reason.NETWORK_DENIED, "networks"),
    ],
)
def test_guard_refuses_blocked_addresses(address: str, reason: Reason, rule: str) -> None:
    guard = SocketGuard(make_policy(), ())
    with pytest.raises(SocketRefusedError) as exc:
        guard.open_socket((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, 80)))
    assert (exc.value.decision.reason, exc.value.decision.rule) == (reason, rule)


def test_guard_applies_networks_allow_but_never_to_metadata() -> None:
    policy = make_policy(net_allow=["127.0.0.0/8", "169.254.0.0/16"])
    guard = SocketGuard(policy, ())
    sock = guard.open_socket((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    sock.close()
    with pytest.raises(SocketRefusedError) as exc:
        guard.open_socket((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80)))
    assert exc.value.decision.reason is Reason.METADATA_ADDRESS


def test_guard_refuses_the_gateways_own_listener() -> None:
    own = ((ipaddress.ip_network("127.0.0.1/32"), 8080),)
    guard = SocketGuard(make_policy(net_allow=["127.0.0.0/8"]), own)
    with pytest.raises(SocketRefusedError) as exc:
        guard.check("127.0.0.1", 8080)
    assert exc.value.decision.reason is Reason.OWN_ADDRESS
    assert guard.check("127.0.0.1", 8081) == ipaddress.ip_address("127.0.0.1")


async def test_dial_connects_only_after_the_check(listener) -> None:
    port = await listener.start()
    allowed = SocketGuard(make_policy(net_allow=["127.0.0.0/8"]), ())
    transport, _ = await dial(allowed, ipaddress.ip_address("127.0.0.1"), port, asyncio.Protocol)
    transport.close()
    with pytest.raises(SocketRefusedError):
        await dial(SocketGuard(make_policy(), ()), ipaddress.ip_address("127.0.0.1"), port, asyncio.Protocol)
    await asyncio.sleep(0)
    assert listener.connections == 1


# --- every outbound path ----------------------------------------------------------------


async def test_webfetch_name_refused_at_the_socket(listener, checks_bypassed) -> None:
    port = await listener.start()
    fetcher = Fetcher(static_hosts=HOSTS)
    try:
        with pytest.raises(PolicyDeniedError) as exc:
            await fetcher.fetch(strict_policy(port), parse_url(f"http://site.example.com:{port}/"))
    finally:
        await fetcher.close()
    assert_refused_as_private(exc)
    assert listener.connections == 0


async def test_webfetch_literal_refused_at_the_socket(listener) -> None:
    # aiohttp never asks the resolver about a literal: only the socket sees this address.
    port = await listener.start()
    fetcher = Fetcher(static_hosts=HOSTS)
    try:
        with pytest.raises(PolicyDeniedError) as exc:
            await fetcher.fetch(strict_policy(port), unchecked_target("127.0.0.1", port))
    finally:
        await fetcher.close()
    assert_refused_as_private(exc)
    assert listener.connections == 0


async def redirecting_origin(aiohttp_server, location: str) -> int:
    """A site on 127.0.0.1 whose / redirects to `location`; its port."""
    from aiohttp import web

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound(location)

    app = web.Application()
    app.router.add_get("/", bounce)
    return int((await aiohttp_server(app, host="127.0.0.1")).port)


def origin_only_policy(*ports: int, **fields):
    """Names under .example.com allowed; of loopback only the origin's 127.0.0.1."""
    return make_policy(
        allow=[".example.com"], net_allow=["127.0.0.1/32"], ports=(80, *ports), max_redirects=3, **fields
    )


async def test_redirect_hop_refused_at_the_socket(listener, aiohttp_server, checks_bypassed) -> None:
    target_port = await listener.start("127.0.0.2")
    origin = await redirecting_origin(aiohttp_server, f"http://inside.example.com:{target_port}/inside")
    hosts = parse_static_hosts({"site.example.com": ["127.0.0.1"], "inside.example.com": ["127.0.0.2"]})
    fetcher = Fetcher(static_hosts=hosts)
    try:
        with pytest.raises(PolicyDeniedError) as exc:
            await fetcher.fetch(origin_only_policy(origin, target_port), parse_url(f"http://site.example.com:{origin}/"))
    finally:
        await fetcher.close()
    assert_refused_as_private(exc)
    assert listener.connections == 0


async def test_redirect_to_a_unicode_spelling_is_refused_at_its_hop(listener, aiohttp_server) -> None:
    target_port = await listener.start("127.0.0.2")
    fullwidth = "\uff11\uff12\uff17.\uff10.\uff10.\uff12"  # 127.0.0.2
    origin = await redirecting_origin(aiohttp_server, f"http://{fullwidth}:{target_port}/inside")
    # default: allow, so only the address can refuse it: as a name it would have passed.
    policy = origin_only_policy(origin, target_port, default=Action.ALLOW)
    start = parse_url(f"http://site.example.com:{origin}/")
    trace = FetchTrace(requested=start, current=start)
    fetcher = Fetcher(static_hosts=HOSTS)
    try:
        with pytest.raises(PolicyDeniedError) as exc:
            await fetcher.fetch_traced(policy, trace, FetchOptions())
    finally:
        await fetcher.close()
    assert_refused_as_private(exc)
    assert [hop.url for hop in trace.redirects] == [f"http://127.0.0.2:{target_port}/inside"]
    assert listener.connections == 0


async def test_provider_call_refused_at_the_socket(listener, checks_bypassed) -> None:
    # Search providers, xAI and the model-native providers all send through this transport.
    port = await listener.start()
    hosts = parse_static_hosts({"provider.example": ["127.0.0.1"]})
    fetcher = Fetcher(static_hosts=hosts)
    base = f"http://provider.example:{port}"
    transport = FetcherProviderTransport(fetcher, [ProviderEndpoint(base)], timeout=2)
    try:
        with pytest.raises(PolicyDeniedError) as exc:
            await transport.send(
                ProviderRequest("GET", f"{base}/search?q=x", {}), timeout=2, allow_private=False
            )
    finally:
        await fetcher.close()
    assert_refused_as_private(exc)
    assert listener.connections == 0


async def test_private_provider_still_never_reaches_metadata(checks_bypassed) -> None:
    hosts = parse_static_hosts({"provider.example": ["169.254.169.254"]})
    fetcher = Fetcher(static_hosts=hosts)
    base = "http://provider.example:9"
    transport = FetcherProviderTransport(
        fetcher, [ProviderEndpoint(base, allow_private=True)], timeout=2
    )
    try:
        with pytest.raises(PolicyDeniedError) as exc:
            await transport.send(
                ProviderRequest("GET", f"{base}/search", {}), timeout=2, allow_private=True
            )
    finally:
        await fetcher.close()
    assert exc.value.decision is not None
    assert exc.value.decision.reason is Reason.METADATA_ADDRESS


async def test_proxy_upstream_connection_refused_at_the_socket(listener, checks_bypassed) -> None:
    port = await listener.start()
    pool = UpstreamPool(static_hosts=lambda: HOSTS, own_addresses=lambda: ())
    request = f"GET / HTTP/1.1\r\nHost: site.example.com:{port}\r\n\r\n".encode()
    try:
        with pytest.raises(PolicyDeniedError) as exc:
            await pool.exchange(
                strict_policy(port), parse_url(f"http://site.example.com:{port}/"), "GET", request
            )
    finally:
        pool.close()
    assert_refused_as_private(exc)
    assert listener.connections == 0


async def test_connect_tunnel_refused_at_the_socket(listener, checks_bypassed) -> None:
    port = await listener.start()
    with pytest.raises(PolicyDeniedError) as exc:
        await open_tunnel(
            strict_policy(port),
            parse_url(f"https://site.example.com:{port}/"),
            asyncio.Protocol,
            static_hosts=HOSTS,
            own_addresses=(),
        )
    assert_refused_as_private(exc)
    assert listener.connections == 0


async def test_connect_tunnel_to_an_unchecked_literal_never_connects(listener, checks_bypassed) -> None:
    # The literal is looked up as a name (and fails closed) or refused; never dialled.
    port = await listener.start()
    with pytest.raises((PolicyDeniedError, UpstreamUnreachableError)):
        await open_tunnel(
            strict_policy(port),
            unchecked_target("127.0.0.1", port),
            asyncio.Protocol,
            static_hosts=HOSTS,
            own_addresses=(),
        )
    assert listener.connections == 0


async def test_allowed_address_still_connects(listener) -> None:
    port = await listener.start()
    policy = make_policy(allow=[".example.com"], net_allow=["127.0.0.0/8"], ports=(port,))
    fetcher = Fetcher(static_hosts=HOSTS)
    try:
        result = await fetcher.fetch(
            policy,
            parse_url(f"http://site.example.com:{port}/"),
            FetchOptions(check_content_type=False),
        )
    finally:
        await fetcher.close()
    assert result.status == 200 and result.body == b"ok"
    assert listener.connections == 1
