"""examples/sandbox/run-in-sandbox.sh, proven: inside the namespace curl reaches an allowed
upstream only through the proxy, is refused for a denied host, and cannot connect anywhere
directly. Needs root and iproute2 (CI runs it); skipped with the reason elsewhere."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.server.proxy.env import start_env

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "sandbox" / "run-in-sandbox.sh"
SUBNET = "10.200.77"


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None or shutil.which("curl") is None:
        return "needs iproute2 (ip) and curl"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True)
    if probe.returncode != 0:
        return f"ip netns unusable here: {probe.stderr.decode().strip()[:200]}"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


async def in_sandbox(proxy_port: int, *command: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        "sh",
        str(SCRIPT),
        "--proxy-port",
        str(proxy_port),
        "--subnet",
        SUBNET,
        "--",
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode(errors="replace")


def netns_names() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


async def test_the_proxy_is_the_only_way_out(tmp_path, make_config) -> None:
    env = await start_env(tmp_path, make_config, bind="0.0.0.0")
    try:
        code = ("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10")
        status, out = await in_sandbox(env.port, *code, env.url("/page"))
        assert (status, out) == (0, "200"), out
        status, out = await in_sandbox(env.port, *code, env.url("/page", "denied.example.org"))
        assert (status, out) == (0, "403"), out
        direct = ("curl", "-sS", "--noproxy", "*", "--connect-timeout", "2", "--max-time", "4")
        for url in (
            f"http://127.0.0.1:{env.upstream_port}/page",  # the namespace's own loopback
            f"http://{SUBNET}.1:{env.upstream_port}/page",  # the host side: upstream is loopback-only
            "http://10.0.0.5/",  # anything else: no route
            "http://site.example.com/",  # no resolver either
        ):
            status, out = await in_sandbox(env.port, *direct, url)
            assert status != 0, (url, out)
        records = env.records("proxy_http")
        assert [r["policy"]["decision"] for r in records] == ["allow", "deny"]
        assert all(r["source"]["ip"] == f"{SUBNET}.2" for r in records)
    finally:
        await env.close()
    assert "gwbox-" not in netns_names()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "gwh" not in links
