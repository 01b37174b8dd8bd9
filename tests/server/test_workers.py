"""`listen.workers: 2` with real processes: a supervising parent and two workers behind one
port, each with its own instance id and audit chain; SIGTERM drains both (exit 0), SIGHUP
reaches both, a killed worker is replaced and continues its chain, a worker that cannot bind
stops the whole gateway."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml

from gateway.config import GatewayConfig
from gateway.server.workers import WorkerPlan, worker_instance_id
from tests.processes import GatewayProcess, free_port

INSTANCES = ["gw-w0", "gw-w1"]


def workers_config(redis_url: str) -> dict:
    return {
        "instance_id": "gw",
        "listen": {"workers": 2, "proxy_port": free_port()},
        "audit": {"path": "audit/gateway-{instance}.jsonl"},
        "state": {"redis": redis_url},
        "server": {"shutdown_grace": 5},
    }


@pytest.fixture
async def gateway(tmp_path, redis_server):
    started = await GatewayProcess(tmp_path, workers_config(redis_server.url)).start()
    yield started
    await started.kill()


async def instances_answering(gateway: GatewayProcess, attempts: int = 60) -> set[str]:
    """The instance ids seen over fresh connections (the kernel picks a worker per connection)."""
    seen: set[str] = set()
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(attempts):
            async with session.get(f"{gateway.url}/v1/status") as response:
                assert response.status == 200
                seen.add((await response.json())["instance"])
            if len(seen) == len(INSTANCES):
                break
    return seen


def audit_file(tmp_path: Path, instance: str) -> Path:
    return tmp_path / "audit" / f"gateway-{instance}.jsonl"


def verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "audit", "verify", str(path)],
        capture_output=True,
        text=True,
    )


async def wait_for_message(gateway: GatewayProcess, message: str, count: int = 1) -> None:
    for _ in range(600):
        if len(gateway.entries(message)) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {message!r} in {gateway.messages()[-10:]}")


@pytest.mark.parametrize(
    ("file_instance", "index", "expected"),
    [
        pytest.param("gw", 0, "gw-w0", id="configured"),
        pytest.param("gw", 3, "gw-w3", id="index"),
        pytest.param(None, 1, "host-42-w1", id="parent-default"),
    ],
)
def test_worker_instance_ids(file_instance: str | None, index: int, expected: str) -> None:
    plan = WorkerPlan(index, "host-42", lambda: GatewayConfig(instance_id=file_instance))
    assert plan.config().instance_id == expected


def test_worker_instance_id_is_the_base_and_the_index() -> None:
    assert [worker_instance_id("gw", n) for n in range(3)] == ["gw-w0", "gw-w1", "gw-w2"]


async def test_two_workers_answer_behind_one_port_each_with_its_own_chain(
    gateway, tmp_path
) -> None:
    assert await instances_answering(gateway) == set(INSTANCES)
    ready = gateway.entries("workers ready")[0]["workers"]
    assert [w["instance"] for w in ready] == INSTANCES
    assert len({w["pid"] for w in ready}) == 2 and gateway.process.pid not in {
        w["pid"] for w in ready
    }
    # Both listen on the same API and proxy ports: the own-address check sees one set.
    proxy_port = yaml.safe_load(gateway.config_path.read_text())["listen"]["proxy_port"]
    binds = [sorted(map(tuple, e["binds"])) for e in gateway.entries("listening")]
    assert len(binds) == 2 and binds[0] == binds[1]
    assert {port for _, port in binds[0]} == {gateway.port, proxy_port}
    gateway.signal(signal.SIGHUP)
    await wait_for_message(gateway, "reloaded", count=2)
    for instance in INSTANCES:
        first = orjson.loads(audit_file(tmp_path, instance).read_bytes().splitlines()[0])
        assert first["event"]["action"] == "log_start"
        assert (first["audit"]["instance_id"], first["observer"]["name"]) == (instance, instance)
        assert first["audit"]["pid"] in {w["pid"] for w in ready}


async def test_sigterm_drains_every_worker_and_exits_0(gateway, tmp_path) -> None:
    gateway.signal(signal.SIGTERM)
    assert await gateway.wait(30) == 0, gateway.oplog[-10:]
    assert gateway.messages().count("drained") == 2
    assert gateway.messages()[-1] == "stopped"
    for instance in INSTANCES:
        result = verify(audit_file(tmp_path, instance))
        assert result.returncode == 0, result.stdout + result.stderr


async def test_a_killed_worker_is_replaced_and_continues_its_chain(gateway, tmp_path) -> None:
    victim = gateway.entries("workers ready")[0]["workers"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    await wait_for_message(gateway, "worker restarted")
    died = gateway.entries("worker died: restarting")[0]
    assert (died["instance"], died["status"]) == ("gw-w0", -signal.SIGKILL)
    replaced = gateway.entries("worker restarted")[0]
    assert replaced["instance"] == "gw-w0" and replaced["pid"] != victim["pid"]
    assert await instances_answering(gateway) == set(INSTANCES)
    gateway.signal(signal.SIGTERM)
    assert await gateway.wait(30) == 0
    # The new worker took the dead one's file over (its lock died with it) and chained on.
    log = audit_file(tmp_path, "gw-w0")
    starts = [r for r in map(orjson.loads, log.read_bytes().splitlines()) if r]
    assert [r["event"]["action"] for r in starts].count("log_start") == 2
    result = verify(log)
    assert result.returncode == 0, result.stdout + result.stderr


async def test_a_worker_that_cannot_bind_stops_the_gateway(tmp_path, redis_server) -> None:
    gateway = GatewayProcess(tmp_path, workers_config(redis_server.url))
    # Someone else holds the port without SO_REUSEPORT: no worker can join it.
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", gateway.port))
    holder.listen()
    try:
        await gateway.launch()
        code = await gateway.wait(60)
    finally:
        holder.close()
        await gateway.kill()
    assert code == 1, gateway.oplog[-10:]
    assert "worker could not start: stopping" in gateway.messages()
    assert "workers ready" not in gateway.messages()
