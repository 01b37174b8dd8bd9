"""Zero-copy tunnel relay on Linux: splice(2) moves a tunnel's bytes socket -> pipe -> socket
inside the kernel, so the bytes of a 1 GB download never become Python objects.

A `SplicePump` takes over a tunnel whose two transports are idle (nothing buffered either
way): it pauses both, relays on duplicates of their sockets, and reports bytes, end of input
and errors to its owner. It never closes the transports; its owner does, after `stop()`.
Where splice is missing (not Linux), `SPLICE_AVAILABLE` is false and tunnels keep the
transport relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from typing import Protocol

SPLICE_AVAILABLE = hasattr(os, "splice") and hasattr(fcntl, "F_SETPIPE_SZ")
PIPE_BYTES = 1024 * 1024  # asked of each pipe; the kernel may give less (pipe-max-size)
ROUND_BYTES = 4 * PIPE_BYTES  # the most one direction moves per event-loop callback
_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)


class PumpOwner(Protocol):
    """What the pump tells its tunnel: `up` is client -> upstream."""

    def pumped(self, up: bool, count: int) -> None: ...
    def pump_eof(self, up: bool) -> None: ...
    def pump_error(self, up: bool, reading: bool, exc: OSError) -> None: ...


class _Direction:
    """One way through the tunnel: src socket -> pipe -> dst socket, with back-pressure
    (src is read only while the pipe is empty, so a slow dst stops the src)."""

    __slots__ = (
        "loop", "owner", "up", "src", "dst", "dst_socket", "pipe_r", "pipe_w", "capacity",
        "in_pipe", "eof", "reading", "writing", "stopped",
    )  # fmt: skip

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        owner: PumpOwner,
        up: bool,
        src: socket.socket,
        dst: socket.socket,
    ) -> None:
        self.loop, self.owner, self.up = loop, owner, up
        self.src, self.dst = src.fileno(), dst.fileno()
        self.dst_socket = dst
        self.pipe_r, self.pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.capacity = _pipe_capacity(self.pipe_w)
        except BaseException:
            os.close(self.pipe_r)
            os.close(self.pipe_w)
            raise
        self.in_pipe = 0
        self.eof = False
        self.reading = self.writing = self.stopped = False

    def start(self) -> None:
        self._read_on()
        self._readable()  # bytes may have arrived while the transports handed over

    def _read_on(self) -> None:
        if not self.reading and not self.stopped:
            self.loop.add_reader(self.src, self._readable)
            self.reading = True

    def _read_off(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.src)
            self.reading = False

    def _readable(self) -> None:
        # Go on while bytes keep coming (a download arrives faster than the loop comes
        # round), up to a fair share per callback: fewer event-loop turns per megabyte.
        moved = 0
        while not self.stopped and not self.in_pipe and moved < ROUND_BYTES:
            try:
                count = os.splice(self.src, self.pipe_w, self.capacity, flags=_FLAGS)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._fail(True, exc)
                return
            if count == 0:
                self.eof = True
                self._read_off()
                self._finish_eof()
                return
            moved += count
            self.in_pipe = count
            self.owner.pumped(self.up, count)
            self._drain()

    def _drain(self) -> None:
        while self.in_pipe and not self.stopped:
            try:
                count = os.splice(self.pipe_r, self.dst, self.in_pipe, flags=_FLAGS)
            except (BlockingIOError, InterruptedError):
                # dst is full: stop reading src until dst takes the pipe's bytes
                self._read_off()
                if not self.writing:
                    self.loop.add_writer(self.dst, self._drain)
                    self.writing = True
                return
            except OSError as exc:
                self._fail(False, exc)
                return
            self.in_pipe -= count
        if self.stopped:
            return
        if self.writing:
            self.loop.remove_writer(self.dst)
            self.writing = False
        if self.eof:
            self._finish_eof()
        else:
            self._read_on()

    def _finish_eof(self) -> None:
        if self.in_pipe or self.stopped:
            return  # the pipe's bytes go first; _drain comes back here
        with contextlib.suppress(OSError):  # dst already gone: its own direction reports that
            self.dst_socket.shutdown(socket.SHUT_WR)
        self.owner.pump_eof(self.up)

    def _fail(self, reading: bool, exc: OSError) -> None:
        self.stop()
        self.owner.pump_error(self.up, reading, exc)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self._read_off()
        if self.writing:
            self.loop.remove_writer(self.dst)
            self.writing = False
        try:
            os.close(self.pipe_r)
        finally:
            os.close(self.pipe_w)


def _pipe_capacity(pipe_w: int) -> int:
    try:
        return fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # over /proc/sys/fs/pipe-max-size for this user: keep the default
        return fcntl.fcntl(pipe_w, fcntl.F_GETPIPE_SZ)


class SplicePump:
    """Both directions of one tunnel, on duplicates of its transports' sockets."""

    __slots__ = ("sockets", "up", "down")

    def __init__(
        self, owner: PumpOwner, client: asyncio.Transport, upstream: asyncio.Transport
    ) -> None:
        loop = asyncio.get_running_loop()
        # Duplicates: the event loop refuses a reader on a transport's own descriptor, and
        # closing a duplicate leaves the connection to the transport that owns it.
        # Every descriptor made here is released again if a later step fails (a dup or a
        # pipe over the descriptor limit, a duplicate that cannot be wrapped, fcntl).
        self.sockets: list[socket.socket] = []
        try:
            for transport in (client, upstream):
                self.sockets.append(_duplicate(transport))
            client_sock, upstream_sock = self.sockets
            self.up = _Direction(loop, owner, True, client_sock, upstream_sock)
            self.down = _Direction(loop, owner, False, upstream_sock, client_sock)
        except BaseException:
            if hasattr(self, "up"):
                self.up.stop()
            self._close_sockets()
            raise
        # The transports stay open but idle: nothing buffered (the caller checked), no reader.
        client.pause_reading()
        upstream.pause_reading()

    def start(self) -> None:
        self.up.start()
        self.down.start()

    def stop(self) -> None:
        """Stop relaying and release the pipes and duplicates (the transports stay open)."""
        try:
            self.up.stop()
        finally:
            try:
                self.down.stop()
            finally:
                self._close_sockets()

    def _close_sockets(self) -> None:
        sockets, self.sockets = self.sockets, []
        for sock in sockets:
            sock.close()


def _duplicate(transport: asyncio.Transport) -> socket.socket:
    """A socket object on a duplicate of the transport's descriptor."""
    fileno = os.dup(_fileno(transport))
    try:
        return socket.socket(fileno=fileno)
    except BaseException:
        os.close(fileno)
        raise


def _fileno(transport: asyncio.Transport) -> int:
    sock = transport.get_extra_info("socket")
    if sock is None:
        raise OSError("the transport has no socket")
    fileno: int = sock.fileno()
    if fileno < 0:
        raise OSError("the transport's socket is closed")
    return fileno
