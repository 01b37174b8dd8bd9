"""Opening a CONNECT tunnel's upstream side: the name resolved once, every address of the
answer checked (one refused address refuses the name, before any connection), then only
checked addresses dialled, in answer order, within one connect budget. Real loopback
listeners count the connections they accept; names come from a static table."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import pytest

from gateway.errors import UpstreamUnreachableError
from gateway.fetch.resolver import parse_static_hosts
from gateway.fetch.tunnel import AddressCheckFailed, open_tunnel, resolve_checked
from gateway.policy.urls import parse_url
from tests.policy.conftest import make_policy


class Listener:
    """A loopback listener that counts the connections it accepted and holds them open."""

    def __init__(self) -> None:
        self.accepted = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest.fixture
async def listener():
    counting = Listener()
    yield counting
    await counting.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def hosts(**names: list[str]) -> Any:
    return parse_static_hosts(
        {f"{name}.example.com": addresses for name, addresses in names.items()}
    )


def policy_for(port: int) -> Any:
    return make_policy(allow=[".example.com"], net_allow=["127.0.0.0/8"], ports=(port,))


async def open_to(name: str, port: int, answer: list[str], policy: Any = None) -> Any:
    """open_tunnel to NAME.example.com:PORT, the static table answering ANSWER."""
    return await open_tunnel(
        policy or policy_for(port),
        parse_url(f"https://{name}.example.com:{port}/"),
        asyncio.Protocol,
        static_hosts=hosts(**{name: answer}),
        own_addresses=(),
    )


async def test_a_checked_name_is_connected_to_its_address(listener: Listener) -> None:
    port = await listener.start()
    opened = await open_to("site", port, ["127.0.0.1"])
    try:
        assert opened.ip == ipaddress.ip_address("127.0.0.1")
        assert opened.decision.allowed and opened.decision.rule == "networks.allow[0]"
    finally:
        opened.transport.close()


async def test_one_refused_address_refuses_the_name_before_any_connection(
    listener: Listener,
) -> None:
    port = await listener.start()
    with pytest.raises(AddressCheckFailed) as caught:
        not_exempt = make_policy(allow=[".example.com"], ports=(port,))  # loopback refused
        await open_to("mixed", port, ["127.0.0.1", "10.0.0.5"], not_exempt)
    assert caught.value.addresses == (
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("10.0.0.5"),
    )
    assert listener.accepted == 0


async def test_the_gateways_own_address_is_refused(listener: Listener) -> None:
    port = await listener.start()
    own = ((ipaddress.ip_network("127.0.0.1/32"), port),)
    with pytest.raises(AddressCheckFailed) as caught:
        await resolve_checked(
            policy_for(port),
            parse_url(f"https://site.example.com:{port}/"),
            static_hosts=hosts(site=["127.0.0.1"]),
            own_addresses=own,
        )
    assert str(caught.value.decision.reason) == "own_address"
    assert listener.accepted == 0


async def test_addresses_are_tried_in_answer_order(listener: Listener) -> None:
    port = await listener.start()
    # 127.0.0.2 listens on nothing: refused, then the next address of the answer is tried.
    opened = await open_to("pair", port, ["127.0.0.2", "127.0.0.1"])
    try:
        assert opened.ip == ipaddress.ip_address("127.0.0.1")
    finally:
        opened.transport.close()


async def test_nothing_listening_is_upstream_unreachable() -> None:
    port = closed_port()
    with pytest.raises(UpstreamUnreachableError, match="could not connect"):
        await open_to("site", port, ["127.0.0.1"])


async def test_a_name_that_does_not_resolve_is_upstream_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", fail)
    with pytest.raises(UpstreamUnreachableError, match="did not resolve"):
        await resolve_checked(
            policy_for(443),
            parse_url("https://gone.example.com/"),
            static_hosts={},
            own_addresses=(),
        )


async def test_an_ip_literal_is_checked_without_a_lookup() -> None:
    addresses, decision = await resolve_checked(
        policy_for(443), parse_url("https://127.0.0.9/"), static_hosts={}, own_addresses=()
    )
    assert addresses == (ipaddress.ip_address("127.0.0.9"),) and decision.allowed
