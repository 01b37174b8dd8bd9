"""Real processes for tests: `python -m gateway serve` and `redis-server` on loopback.

Each is a subprocess on a free 127.0.0.1 port, stopped by its own pid; the gateway's
operational log (JSON lines on stderr) is collected so tests can read what it said.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

STARTUP_TIMEOUT = 20.0


# Ports already handed out in this run: a port just released may be the kernel's next pick,
# and a test that takes two (a gateway's API and proxy ports) must never get the same twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free loopback port never handed out before in this test run."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class GatewayProcess:
    """One `gateway serve` subprocess with its config written to `directory`; `prefix`: a
    command that runs it (e.g. in another namespace) and execs its arguments."""

    def __init__(
        self, directory: Path, config: dict[str, Any], *, prefix: tuple[str, ...] = ()
    ) -> None:
        self.directory = directory
        self.prefix = prefix
        self.port = free_port()
        config = {**config, "listen": {**config.get("listen", {}), "port": self.port}}
        self.config_path = directory / f"gateway-{self.port}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        # Several workers: the supervising parent says so once every worker listens.
        workers = int(config["listen"].get("workers", 1))
        self.ready_message = "workers ready" if workers > 1 else "listening"
        self.process: asyncio.subprocess.Process | None = None
        self.oplog: list[dict[str, Any]] = []
        self._reader: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> GatewayProcess:
        await self.launch()
        try:
            await asyncio.wait_for(self._listening.wait(), STARTUP_TIMEOUT)
        except TimeoutError:
            await self.kill()
            raise RuntimeError(f"gateway did not start: {self.oplog[-5:]}") from None
        return self

    async def launch(self) -> None:
        """Start the process without waiting for it to listen."""
        self.process = await asyncio.create_subprocess_exec(
            *self.prefix,
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--config",
            str(self.config_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(self.directory),
        )
        self._reader = asyncio.ensure_future(self._read_log())

    async def _read_log(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        async for line in self.process.stderr:
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                entry = {"message": line.decode(errors="replace").rstrip()}
            self.oplog.append(entry)
            if entry.get("message") == self.ready_message:
                self._listening.set()

    def entries(self, message: str) -> list[dict[str, Any]]:
        return [entry for entry in self.oplog if entry.get("message") == message]

    def messages(self) -> list[str]:
        return [str(entry.get("message")) for entry in self.oplog]

    def signal(self, signum: int) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signum)

    async def wait(self, timeout: float) -> int:
        assert self.process is not None
        code = await asyncio.wait_for(self.process.wait(), timeout)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 5)
        return code

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            await self.process.wait()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


class RedisProcess:
    """`redis-server` on a free loopback port, no persistence, stopped by its pid."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.process = await asyncio.create_subprocess_exec(
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.directory),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            await writer.wait_closed()
            return self
        await self.stop()
        raise RuntimeError("redis-server did not start")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            await self.process.wait()
