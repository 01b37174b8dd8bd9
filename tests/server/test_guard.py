"""Class: the API port is unguarded. `gateway serve` with `server.header_timeout: 1` and
`server.max_connections_per_ip: 20`: heads dripped or never finished are cut at the
timeout (408 when a head had begun), a body that stops arriving is refused, one address
past its cap is answered 503 at accept while another address is not, and a keep-alive
connection idle between requests is left to `keepalive_timeout`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.conftest import loopback_policy
from tests.processes import GatewayProcess

HEADER_TIMEOUT = 1
PER_IP = 20
BOUND = 15.0  # seconds any single read below may take (far past the timeouts under test)


@pytest.fixture
async def gateway(tmp_path, upstream) -> AsyncIterator[GatewayProcess]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(loopback_policy(upstream.port))
    config = {
        "policy": str(policy),
        "audit": {"path": str(tmp_path / "audit" / "api-{instance}.jsonl")},
        "instance_id": "guard-test",
        "server": {
            "header_timeout": HEADER_TIMEOUT,
            "max_connections_per_ip": PER_IP,
            "keepalive_timeout": 30,
        },
    }
    process = await GatewayProcess(tmp_path, config).start()
    yield process
    await process.kill()


async def connect(gateway: GatewayProcess, source: str = "127.0.0.1"):
    return await asyncio.open_connection("127.0.0.1", gateway.port, local_addr=(source, 0))


async def read_all(reader: asyncio.StreamReader) -> bytes:
    async with asyncio.timeout(BOUND):
        return await reader.read()


async def test_a_dripped_head_is_cut_at_header_timeout(gateway) -> None:
    reader, writer = await connect(gateway)
    writer.write(b"POST /v1/fetch HTTP/1.1\r\nHost: gw\r\n")

    async def drip() -> None:
        with contextlib.suppress(ConnectionError):
            for _ in range(100):
                writer.write(b"X-Drip: 1\r\n")
                await writer.drain()
                await asyncio.sleep(0.2)

    dripping = asyncio.ensure_future(drip())
    answer = await read_all(reader)
    dripping.cancel()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"server.header_timeout" in answer


async def test_a_silent_connection_is_closed_without_an_answer(gateway) -> None:
    reader, writer = await connect(gateway)
    assert await read_all(reader) == b""
    writer.close()


async def test_a_body_that_stops_arriving_is_refused(gateway) -> None:
    reader, writer = await connect(gateway)
    writer.write(
        b"POST /v1/fetch HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b'Content-Length: 100\r\n\r\n{"url": '
    )
    answer = await read_all(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"the request body stopped arriving (server.header_timeout)" in answer


async def test_one_address_past_its_cap_is_refused_at_accept(gateway) -> None:
    held = []
    for _ in range(PER_IP):
        reader, writer = await connect(gateway)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")  # kept alive after
        async with asyncio.timeout(BOUND):
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
        held.append((reader, writer))
    refused = []
    for _ in range(40):  # a pile of connections more: each answered at once, nothing read
        reader, writer = await connect(gateway)
        refused.append(await read_all(reader))
        writer.close()
    assert all(answer.startswith(b"HTTP/1.1 503 ") for answer in refused)
    assert b"Retry-After: 1" in refused[0] and b"max_connections_per_ip" in refused[0]
    # Another address is not held to this one's count.
    reader, writer = await connect(gateway, source="127.0.0.2")
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    assert (await read_all(reader)).startswith(b"HTTP/1.1 200 ")
    writer.close()
    # A slot frees when one of the address's connections ends.
    reader, writer = held.pop()
    writer.close()
    await writer.wait_closed()
    for _ in range(50):
        reader, writer = await connect(gateway)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        answer = await read_all(reader)
        writer.close()
        if answer.startswith(b"HTTP/1.1 200 "):
            break
        await asyncio.sleep(0.1)  # the gateway has not seen the close yet
    else:
        raise AssertionError("no slot came free")
    for _, writer in held:
        writer.close()


async def test_keep_alive_between_requests_is_not_cut_by_the_head_timer(gateway) -> None:
    reader, writer = await connect(gateway)
    for _ in range(2):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        async with asyncio.timeout(BOUND):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        assert head.startswith(b"HTTP/1.1 200 ")
        await asyncio.sleep(HEADER_TIMEOUT * 1.5)  # idle past header_timeout, within keep-alive
    writer.close()
