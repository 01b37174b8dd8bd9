"""/metrics with several workers: every scrape answers every live worker's series, each
labelled `worker`; a dead worker's snapshot is left out; the exposition stays one block per
family. Two real worker processes behind one port, and the merge on its own."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.server.worker_metrics import WorkerMetrics, merge_expositions, with_worker_label
from tests.processes import GatewayProcess


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        pytest.param("up 1.0", 'up{worker="3"} 1.0', id="no-labels"),
        pytest.param('req_total{a="b"} 2.0', 'req_total{worker="3",a="b"} 2.0', id="labels"),
        pytest.param(
            'h_bucket{le="+Inf",r="/x y"} 4.0',
            'h_bucket{worker="3",le="+Inf",r="/x y"} 4.0',
            id="space-in-a-label-value",
        ),
        pytest.param("odd{} 1.0", 'odd{worker="3"} 1.0', id="empty-braces"),
    ],
)
def test_with_worker_label(sample: str, expected: str) -> None:
    assert with_worker_label(sample, "3") == expected


def exposition(requests: int, in_flight: int, latencies: list[float]) -> bytes:
    registry = CollectorRegistry()
    Counter("requests", "Requests", ["route"], registry=registry).labels("/v1/fetch").inc(requests)
    Gauge("in_flight", "In flight", registry=registry).set(in_flight)
    histogram = Histogram("latency_seconds", "Latency", buckets=(0.1, 1.0), registry=registry)
    for value in latencies:
        histogram.observe(value)
    return generate_latest(registry)


def values(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_merged_exposition_has_one_block_per_family_and_every_workers_samples() -> None:
    merged = merge_expositions({"1": exposition(5, 2, [0.5]), "0": exposition(3, 0, [0.05, 2.0])})
    lines = merged.decode().splitlines()
    types = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(types) == len(set(types))
    got = values(merged)
    assert got[("requests_total", (("route", "/v1/fetch"), ("worker", "0")))] == 3
    assert got[("requests_total", (("route", "/v1/fetch"), ("worker", "1")))] == 5
    assert got[("in_flight", (("worker", "1"),))] == 2
    assert got[("latency_seconds_bucket", (("le", "0.1"), ("worker", "0")))] == 1
    assert got[("latency_seconds_count", (("worker", "0"),))] == 2
    assert got[("latency_seconds_count", (("worker", "1"),))] == 1
    # Every sample of a family follows its own TYPE line, worker 0 first.
    block = lines[lines.index("# TYPE requests_total counter") + 1 :][:2]
    assert [line.split("{")[1].split(",")[0] for line in block] == ['worker="0"', 'worker="1"']


async def test_a_dead_workers_snapshot_is_left_out(tmp_path: Path) -> None:
    """The other worker is a real process killed with SIGKILL: its files stay behind, its
    lock goes with it."""
    script = (
        "import sys, time\n"
        "from gateway.server.worker_metrics import WorkerMetrics\n"
        "w = WorkerMetrics(sys.argv[1], '1'); w.open(); w.write(sys.stdin.buffer.read())\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert other.stdin is not None and other.stdout is not None
        other.stdin.write(exposition(5, 1, []))
        other.stdin.close()
        assert await asyncio.to_thread(other.stdout.readline) == b"ready\n"
        own = WorkerMetrics(str(tmp_path), "0")
        own.open()
        merged = values(own.merge(exposition(3, 0, [])))
        assert merged[("requests_total", (("route", "/v1/fetch"), ("worker", "1")))] == 5
        with pytest.raises(OSError):  # the slot is taken while its worker lives
            WorkerMetrics(str(tmp_path), "1").open()
        other.send_signal(signal.SIGKILL)
        await asyncio.to_thread(other.wait)
        assert (tmp_path / "1.prom").exists()
        merged = values(own.merge(exposition(3, 0, [])))
        assert {labels for _, labels in merged if ("worker", "1") in labels} == set()
        assert merged[("requests_total", (("route", "/v1/fetch"), ("worker", "0")))] == 3
        # A replacement takes over the slot, and the last worker out removes the directory.
        replacement = WorkerMetrics(str(tmp_path), "1")
        replacement.open()
        replacement.close()
        own.close()
        assert not tmp_path.exists()
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
        if other.stdout is not None:
            other.stdout.close()


def test_a_scrapes_liveness_probe_does_not_keep_a_restarted_worker_out(tmp_path: Path) -> None:
    """A scrape probes a dead worker's slot with a shared lock for a moment; a replacement
    starting in that moment waits for it instead of giving up its slot."""
    probe = os.open(tmp_path / "1.lock", os.O_RDONLY | os.O_CREAT, 0o600)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
    threading.Timer(0.03, os.close, (probe,)).start()  # closing drops the probe's lock
    replacement = WorkerMetrics(str(tmp_path), "1")
    replacement.open()
    assert not WorkerMetrics(str(tmp_path), "0")._alive("2")
    assert WorkerMetrics(str(tmp_path), "0")._alive("1")
    replacement.close()


def test_a_worker_that_never_opened_removes_nothing(tmp_path: Path) -> None:
    (tmp_path / "1.prom").write_bytes(b"up 1\n")
    WorkerMetrics(str(tmp_path), "1").close()
    assert (tmp_path / "1.prom").exists()


@pytest.mark.parametrize(
    "name", ["../x", "w0", "", "1/2"], ids=["dotdot", "letters", "empty", "slash"]
)
def test_worker_names_are_indexes(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        WorkerMetrics(str(tmp_path), name)


# --- two real workers ---------------------------------------------------------------------

STATUS_REQUESTS = 12
STATUS_COUNT = "gateway_http_request_duration_seconds_count"


@pytest.fixture
async def two_workers(tmp_path, redis_server, monkeypatch):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))  # where the supervisor makes its directory
    config = {
        "instance_id": "gw",
        "listen": {"workers": 2},
        "audit": {"path": "audit/gateway-{instance}.jsonl"},
        "state": {"redis": redis_server.url},
        "server": {"shutdown_grace": 5},
    }
    started = await GatewayProcess(tmp_path, config).start()
    yield started, run
    await started.kill()


async def scrape(session: aiohttp.ClientSession, url: str) -> bytes:
    async with session.get(f"{url}/metrics") as response:
        assert response.status == 200
        return await response.read()


def status_counts(text: bytes) -> dict[str, float]:
    """/v1/status requests answered, by worker."""
    return {
        labels["worker"]: sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
        if sample.name == STATUS_COUNT and (labels := sample.labels).get("route") == "/v1/status"
    }


def snapshot_counts(run: Path) -> dict[str, float]:
    """/v1/status requests in the snapshots the workers wrote, by worker."""
    counts: dict[str, float] = {}
    for directory in run.iterdir():
        for snapshot in directory.glob("*.prom"):
            own = status_counts(with_label(snapshot.read_bytes(), snapshot.stem))
            counts.update(own)
    return counts


def with_label(exposition: bytes, worker: str) -> bytes:
    return merge_expositions({worker: exposition})


async def test_every_scrape_of_two_workers_answers_both(two_workers) -> None:
    gateway, run = two_workers
    connector = aiohttp.TCPConnector(force_close=True)  # a fresh connection: any worker
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(STATUS_REQUESTS):
            async with session.get(f"{gateway.url}/v1/status") as response:
                assert response.status == 200
        # A scrape answers the other worker's snapshot, at most a second old: wait until both
        # snapshots on disk hold every request (a scrape alone could be answered by the one
        # worker whose live values already do, while the other's snapshot still lags).
        for _ in range(400):
            if sum(snapshot_counts(run).values()) == STATUS_REQUESTS:
                break
            await asyncio.sleep(0.05)
        for _ in range(8):
            text = await scrape(session, gateway.url)
            assert sum(status_counts(text).values()) == STATUS_REQUESTS
            info = {
                (s.labels["worker"], s.labels["instance"])
                for family in text_string_to_metric_families(text.decode())
                for s in family.samples
                if s.name == "gateway_info"
            }
            assert info == {("0", "gw-w0"), ("1", "gw-w1")}
            types = [
                line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE")
            ]
            assert len(types) == len(set(types))
    [directory] = list(run.iterdir())
    assert sorted(p.name for p in directory.iterdir()) == ["0.lock", "0.prom", "1.lock", "1.prom"]
    gateway.signal(signal.SIGTERM)
    assert await gateway.wait(30) == 0
    assert list(run.iterdir()) == []
