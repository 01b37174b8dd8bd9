"""Class: a full audit disk looks healthy. `gateway serve` with its audit log on a small
tmpfs in a mount namespace of its own; the test fills that file system (through the
process's /proc/PID/root) and empties it again. While it is full every request is refused
before anything leaves (WebFetch and the forward proxy alike), `/readyz` fails, `/v1/status` names the error and the operational
log says so once; when space returns it recovers by itself, saying so once.

Needs root (the suite runs as root inside `unshare -n`) for `unshare -m` and `mount`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from pathlib import Path

import aiohttp
import pytest

from gateway.audit.verify import verify_files
from tests.conftest import STATIC_HOSTS, loopback_policy
from tests.processes import GatewayProcess, free_port
from tests.upstream import ScriptedUpstream

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None,
    reason="needs root, unshare and mount (the suite's network namespace runs as root)",
)

# Runs its arguments in a new mount namespace with a 512 KB tmpfs mounted on $1.
ON_SMALL_DISK = 'mount -t tmpfs -o size=512k tmpfs "$1" && shift && exec "$@"'
FAILING = "audit log cannot be written: every request is refused until it can"
RECOVERED = "audit log can be written again"
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"


def fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        # What is left is smaller than a block of 64 KB: fill that too.
        try:
            while True:
                handle.write(b"\0" * 512)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


async def wait_for(probe, attempts: int = 100) -> None:
    """Poll `probe()` (an awaitable's factory returning bool) until true, up to ~20 s."""
    for _ in range(attempts):
        if await probe():
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the condition never held")


async def test_a_full_audit_disk_fails_readiness_and_recovers_by_itself(tmp_path) -> None:
    upstream = ScriptedUpstream([OK], repeat=True)
    port = await upstream.start()
    disk = tmp_path / "disk"
    disk.mkdir()
    policy = tmp_path / "policy.yaml"
    policy.write_text(loopback_policy(port))
    config = {
        "policy": str(policy),
        "audit": {"path": str(disk / "audit-{instance}.jsonl")},
        "instance_id": "disk-test",
        "resolver": {"hosts": {k: list(v) for k, v in STATIC_HOSTS.items()}},
        "listen": {"proxy_port": free_port()},
    }
    gateway = GatewayProcess(
        tmp_path, config, prefix=("unshare", "-m", "sh", "-c", ON_SMALL_DISK, "sh", str(disk))
    )
    await gateway.start()
    assert gateway.process is not None
    inside = Path(f"/proc/{gateway.process.pid}/root") / disk.relative_to("/")
    url = f"http://site.example.com:{port}/x"
    try:
        async with aiohttp.ClientSession(gateway.url) as http:

            async def fetch() -> tuple[int, dict]:
                async with http.post("/v1/fetch", json={"url": url}) as response:
                    return response.status, await response.json()

            async def ready() -> bool:
                async with http.get("/readyz") as response:
                    return response.status == 200

            async def audit_status() -> dict:
                async with http.get("/v1/status") as response:
                    return (await response.json())["audit"]

            async def proxied() -> int:
                proxy = f"http://127.0.0.1:{config['listen']['proxy_port']}"
                async with http.get(url, proxy=proxy) as response:
                    return response.status

            status, _ = await fetch()
            assert status == 200 and await proxied() == 200 and await ready()
            asked = len(upstream.requests)

            filler = fill(inside)
            for _ in range(5):
                status, body = await fetch()
                assert status == 503, body
                assert body["error"]["code"] == "unavailable"
                assert "cannot write audit log" in body["error"]["message"]
                assert await proxied() == 503
            assert len(upstream.requests) == asked, "nothing left while the log was full"
            assert not await ready()
            async with http.get("/readyz") as response:
                assert "audit log unusable" in (await response.json())["error"]["message"]
            audit = await audit_status()
            assert audit["healthy"] is False and "full" in audit["error"]
            assert len(gateway.entries(FAILING)) == 1  # one line for the change, not per request
            assert gateway.entries(RECOVERED) == []

            filler.unlink()
            await wait_for(ready)  # nothing but the gateway's own probe brings it back
            audit = await audit_status()
            assert audit["healthy"] is True and audit["error"] is None
            status, _ = await fetch()
            assert status == 200 and await proxied() == 200
            assert len(upstream.requests) == asked + 2
            assert len(gateway.entries(FAILING)) == 1 and len(gateway.entries(RECOVERED)) == 1
        log_files = [str(path) for path in inside.glob("audit-*.jsonl")]
        assert [result.valid for result in verify_files(log_files)] == [True]
    finally:
        await gateway.kill()
        await upstream.close()
