"""Containerfile: the image's documented run line starts and writes its audit log where the
header says. Without a container builder this runs the same layout for real: `gateway serve`
in a private mount namespace whose /var/lib holds the image's state folder, the configuration
folder bind-mounted read-only (as `-v ./deploy-config:/config:ro` mounts it), the image's
environment and working directory, and the header's command line."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.processes import STARTUP_TIMEOUT, free_port

ROOT = Path(__file__).resolve().parent.parent
CONTAINERFILE = (ROOT / "Containerfile").read_text()
TOKEN = "gwt_container-test-token"


def image_environment() -> dict[str, str]:
    """Every `ENV K=V …` of the Containerfile (continuation lines joined)."""
    text = CONTAINERFILE.replace("\\\n", " ")
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[4:]):
                key, _, value = pair.partition("=")
                found[key] = value
    return found


def image_workdir() -> str:
    return re.findall(r"^WORKDIR (\S+)$", CONTAINERFILE, re.MULTILINE)[-1]


def documented_command() -> list[str]:
    """The header's `podman run … agent-gateway \\ serve --config …`: what follows the image."""
    header = "\n".join(line.lstrip("# ") for line in CONTAINERFILE.splitlines() if line[:1] == "#")
    run = header.split("podman run", 1)[1].replace("\\\n", " ").split("\n", 1)[0]
    return shlex.split(run.split("agent-gateway", 1)[1])


def test_the_header_and_the_image_agree_on_the_audit_folder() -> None:
    assert "The audit log goes to /var/lib/gateway/audit" in CONTAINERFILE
    path = image_environment()["GATEWAY_AUDIT_PATH"]
    assert path.startswith("/var/lib/gateway/audit/") and "{instance}" in path
    assert image_workdir() == "/var/lib/gateway"
    assert "chown -R gateway /var/lib/gateway" in CONTAINERFILE
    assert documented_command() == ["serve", "--config", "/config/gateway.yaml"]


def _namespaces_work() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and sys.platform == "linux"


needs_root = pytest.mark.skipif(
    not _namespaces_work(), reason="needs root and unshare(1) for a private mount namespace"
)


def _layout(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The deploy-config folder, the folder standing for the image's /var/lib, and the prefix
    that runs a command in the image's layout (read-only config, /var/lib, working directory)."""
    config_dir, var_lib = tmp_path / "deploy-config", tmp_path / "var-lib"
    (config_dir / "policies").mkdir(parents=True)
    (var_lib / "gateway" / "audit").mkdir(parents=True)
    (config_dir / "policies" / "agent.yaml").write_text(
        "name: agent\ndomains: {allow: [docs.python.org]}\n"
    )
    config = {
        "listen": {"host": "0.0.0.0", "port": free_port()},  # what a container must bind
        "policy": "policies/agent.yaml",
        "clients": [
            {"id": "agent", "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest()}
        ],
    }
    (config_dir / "gateway.yaml").write_text(yaml.safe_dump(config))
    script = (
        'mount --bind "$1" /var/lib && mount --bind "$2" "$2" '
        '&& mount -o remount,ro,bind "$2" && cd "$3" && shift 3 && exec "$@"'
    )
    prefix = ["unshare", "-m", "sh", "-c", script, "sh", str(var_lib), str(config_dir)]
    return config_dir, var_lib, [*prefix, image_workdir()]


def _command(config_dir: Path) -> list[str]:
    """The documented command line, its /config standing for the mounted folder."""
    args = [arg.replace("/config/", f"{config_dir}/") for arg in documented_command()]
    return [sys.executable, "-m", "gateway", *args]


def _environment(*, image: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    if image:
        env.update(image_environment())
    return env


@needs_root
async def test_the_documented_run_line_serves_and_audits_under_var_lib(tmp_path: Path) -> None:
    config_dir, var_lib, prefix = _layout(tmp_path)
    port = yaml.safe_load((config_dir / "gateway.yaml").read_text())["listen"]["port"]
    process = await asyncio.create_subprocess_exec(
        *prefix,
        *_command(config_dir),
        env=_environment(image=True),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    log: list[bytes] = []
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT):
            while b'"listening"' not in (line := await process.stderr.readline()):
                assert line, f"serve exited: {b''.join(log)!r}"
                log.append(line)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert response.status == 200
            headers = {"Authorization": f"Bearer {TOKEN}"}
            url = f"http://127.0.0.1:{port}/v1/fetch"
            async with session.post(url, json={"url": "https://example.org/"}, headers=headers):
                pass  # refused by the policy: a record all the same
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    logs = list((var_lib / "gateway" / "audit").glob("gateway-*.jsonl"))
    assert len(logs) == 1, logs
    assert b'"domain_not_allowed"' in logs[0].read_bytes()
    assert not (config_dir / "audit").exists()


@needs_root
async def test_without_the_image_default_the_read_only_config_is_refused(tmp_path: Path) -> None:
    """What the image's environment fixes: the built-in default writes beside the config."""
    config_dir, _, prefix = _layout(tmp_path)
    check = await asyncio.create_subprocess_exec(
        *prefix,
        sys.executable,
        "-m",
        "gateway",
        "config",
        "check",
        f"{config_dir}/gateway.yaml",
        env=_environment(image=False),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await check.communicate()
    assert check.returncode == 1
    assert b"unwritable_audit: audit.path (its default): " in out
    assert b"read-only file system" in out
    served = await asyncio.create_subprocess_exec(
        *prefix,
        *_command(config_dir),
        env=_environment(image=False),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(served.communicate(), STARTUP_TIMEOUT)
    assert served.returncode != 0 and b"Read-only file system" in err
    with_image = await asyncio.create_subprocess_exec(
        *prefix,
        sys.executable,
        "-m",
        "gateway",
        "config",
        "check",
        f"{config_dir}/gateway.yaml",
        env=_environment(image=True),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await with_image.communicate()
    assert with_image.returncode == 0, out
