"""`gateway serve` start-up: a port already in use fails before anything is written to the
audit log, and says why; `--log-level` and GATEWAY_CONFIG reach the process."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import yaml


def serve(
    config: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(config.parent),
        env=env,
    )


def test_a_busy_port_writes_no_audit_record(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = tmp_path / "gateway.yaml"
        config.write_text(
            yaml.safe_dump(
                {"listen": {"port": port}, "audit": {"path": "audit/gateway-{instance}.jsonl"}}
            )
        )
        done = serve(config, "--config", str(config))
    assert done.returncode == 1
    assert "address already in use" in done.stderr.lower()
    assert "stopped" not in done.stderr and "audit_seq" not in done.stderr
    assert not (tmp_path / "audit").exists() or not any((tmp_path / "audit").iterdir())


def test_log_level_and_gateway_config(tmp_path: Path) -> None:
    # A configuration error is reported whatever the level; the file comes from the variable.
    config = tmp_path / "gateway.yaml"
    config.write_text("listen: {port: 0}\n")
    import os

    env = {**os.environ, "GATEWAY_CONFIG": str(config)}
    done = serve(config, "--log-level", "error", env=env)
    assert done.returncode == 2
    assert f"{config}:1:16: out_of_range: listen.port" in done.stderr
    bad = serve(config, "--log-level", "loud", env=env)
    assert bad.returncode == 2 and "invalid choice: 'loud'" in bad.stderr


async def test_a_provider_without_its_key_is_named_at_start_up(tmp_path: Path) -> None:
    from tests.processes import GatewayProcess

    config = {
        "audit": {"path": str(tmp_path / "audit" / "gateway-{instance}.jsonl")},
        "search": {
            "providers": [{"id": "brave", "kind": "brave", "api_key_env": "UNSET_TEST_KEY_4711"}]
        },
    }
    gateway = GatewayProcess(tmp_path, config)
    await gateway.start()
    try:
        # Said once, by the search engine as it is built (each worker builds its own).
        [warning] = [m for m in gateway.oplog if "no API key in UNSET_TEST_KEY_4711" in str(m.get("message"))]
        assert warning["level"] == "warning" and "brave" in warning["message"]
    finally:
        gateway.signal(15)
        assert await gateway.wait(30) == 0


async def test_log_level_warning_keeps_only_warnings(tmp_path: Path) -> None:
    # The missing key is a warning: written; "listening" and "stopped" are info: not.
    import asyncio
    import os
    import signal

    import aiohttp
    import orjson

    from tests.processes import STARTUP_TIMEOUT, free_port

    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": {"port": port},
                "audit": {"path": "audit/gateway-{instance}.jsonl"},
                "search": {
                    "providers": [
                        {"id": "brave", "kind": "brave", "api_key_env": "UNSET_TEST_KEY_4712"}
                    ]
                },
            }
        )
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--config",
        str(config),
        "--log-level",
        "warning",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(tmp_path),
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(int(STARTUP_TIMEOUT * 20)):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the gateway did not become ready")
    finally:
        os.kill(process.pid, signal.SIGTERM)
        assert process.stderr is not None
        err = await asyncio.wait_for(process.stderr.read(), 30)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    lines = [orjson.loads(line) for line in err.splitlines() if line.strip()]
    [warning] = [line["message"] for line in lines]
    assert "no API key in UNSET_TEST_KEY_4712" in warning
    assert {line["level"] for line in lines} == {"warning"}


async def test_a_restart_appends_to_the_same_chain_file(tmp_path: Path) -> None:
    """The default instance id is the host name, not the pid: a restarted gateway writes on
    in the same file, and the chain across both runs (and a SIGKILL between them) verifies."""
    from gateway.audit.chains import verify_paths
    from gateway.configload.serving import default_instance_id
    from tests.processes import GatewayProcess

    config = {"audit": {"path": str(tmp_path / "audit" / "gateway-{instance}.jsonl")}}
    for how in ("SIGTERM", "SIGKILL", "SIGTERM"):
        gateway = GatewayProcess(tmp_path, config)
        await gateway.start()
        if how == "SIGKILL":
            await gateway.kill()  # no final records: the next start recovers the lock
            continue
        gateway.signal(15)
        assert await gateway.wait(30) == 0
    (log,) = (tmp_path / "audit").glob("*.jsonl")
    assert log.name == f"gateway-{default_instance_id()}.jsonl"
    starts = [line for line in log.read_bytes().splitlines() if b'"log_start"' in line]
    assert len(starts) == 3
    report = verify_paths([str(tmp_path / "audit")])
    assert report.valid and len(report.chains) == 1, report.describe()
