"""The splice relay's hand-over on real sockets: a pump relays both ways and half-closes, and a
hand-over that fails at any step (a dup or a pipe over the descriptor limit, a duplicate
that cannot be wrapped, a pipe whose size cannot be read) gives back every descriptor it
made and leaves the transports reading, so the tunnel can keep its transport relay."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import socket
from collections.abc import Callable
from typing import Any

import pytest

from gateway.server.proxy.splice import SPLICE_AVAILABLE, SplicePump

pytestmark = [
    pytest.mark.skipif(not SPLICE_AVAILABLE, reason="this platform has no splice(2)"),
    pytest.mark.skipif(not os.path.exists("/proc/self/fd"), reason="needs /proc"),
]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class Owner:
    """What a tunnel hears from its pump, kept for the assertions."""

    def __init__(self) -> None:
        self.bytes = {True: 0, False: 0}
        self.eof: list[bool] = []
        self.errors: list[tuple[bool, bool, OSError]] = []

    def pumped(self, up: bool, count: int) -> None:
        self.bytes[up] += count

    def pump_eof(self, up: bool) -> None:
        self.eof.append(up)

    def pump_error(self, up: bool, reading: bool, exc: OSError) -> None:
        self.errors.append((up, reading, exc))


class Ends:
    """Two loopback TCP connections, as a tunnel has them: the proxy's side of each is an
    asyncio transport; the far ends (the client, the upstream) are plain sockets."""

    def __init__(self) -> None:
        self.far: list[socket.socket] = []
        self.transports: list[asyncio.Transport] = []

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        with socket.create_server(("127.0.0.1", 0)) as listener:
            for _ in range(2):
                far = socket.create_connection(listener.getsockname())
                near, _ = listener.accept()
                far.setblocking(False)
                transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, near)
                self.far.append(far)
                self.transports.append(transport)  # type: ignore[arg-type]

    def close(self) -> None:
        for transport in self.transports:
            transport.abort()
        for sock in self.far:
            sock.close()


@pytest.fixture
async def ends():
    pair = Ends()
    await pair.open()
    yield pair
    pair.close()
    await asyncio.sleep(0)  # let the transports finish closing


async def recv_exactly(sock: socket.socket, count: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    async with asyncio.timeout(5):
        while len(data) < count:
            chunk = await loop.sock_recv(sock, count - len(data))
            if not chunk:
                break
            data += chunk
    return data


async def test_a_pump_relays_both_ways_and_gives_back_its_descriptors(ends) -> None:
    before = open_fds()
    owner = Owner()
    pump = SplicePump(owner, *ends.transports)
    assert len(open_fds() - before) == 6  # two duplicates, two pipes
    pump.start()
    client, upstream = ends.far
    client.sendall(b"hello upstream")
    assert await recv_exactly(upstream, 14) == b"hello upstream"
    upstream.sendall(b"hello client")
    assert await recv_exactly(client, 12) == b"hello client"
    client.shutdown(socket.SHUT_WR)
    for _ in range(100):
        if owner.eof:
            break
        await asyncio.sleep(0.01)
    assert owner.eof == [True] and owner.bytes == {True: 14, False: 12}
    assert await recv_exactly(upstream, 1) == b""  # the half-close went through
    pump.stop()
    assert open_fds() == before
    assert not owner.errors


def failing_on(call: int, real: Callable[..., Any], error: int = errno.EMFILE):
    """`real`, except that its `call`-th call (from 1) raises OSError(error)."""
    calls = 0

    def fake(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == call:
            raise OSError(error, os.strerror(error))
        return real(*args)

    return fake


def dup_to_a_file(fileno: int) -> int:
    """A descriptor that is not a socket, where a duplicate was asked for."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def pipe_size_unknown(call_from: int):
    """fcntl that can neither set nor read a pipe's size from its `call_from`-th call."""
    real = fcntl.fcntl
    calls = 0

    def fake(fd: int, cmd: int, *args: Any) -> Any:
        nonlocal calls
        if cmd in (fcntl.F_SETPIPE_SZ, fcntl.F_GETPIPE_SZ):
            calls += 1
            if calls >= call_from:
                raise OSError(errno.EPERM, os.strerror(errno.EPERM))
        return real(fd, cmd, *args)

    return fake


@pytest.mark.parametrize(
    ("module", "name", "make_fake"),
    [
        (os, "dup", lambda: failing_on(1, os.dup)),
        (os, "dup", lambda: failing_on(2, os.dup)),
        (os, "dup", lambda: dup_to_a_file),
        (os, "pipe2", lambda: failing_on(1, os.pipe2)),
        (os, "pipe2", lambda: failing_on(2, os.pipe2)),
        (fcntl, "fcntl", lambda: pipe_size_unknown(1)),
        (fcntl, "fcntl", lambda: pipe_size_unknown(2)),
    ],
    ids=[
        "first-dup",
        "second-dup",
        "duplicate-not-a-socket",
        "first-pipe",
        "second-pipe",
        "first-pipe-size",
        "second-pipe-size",
    ],
)
async def test_a_failed_hand_over_gives_back_every_descriptor(
    ends, monkeypatch, module, name, make_fake
) -> None:
    before = open_fds()
    with monkeypatch.context() as patch, pytest.raises(OSError):
        patch.setattr(module, name, make_fake())
        SplicePump(Owner(), *ends.transports)
    assert open_fds() == before
    # The transports were not paused: the tunnel goes on with its transport relay.
    assert all(transport.is_reading() for transport in ends.transports)
