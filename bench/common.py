"""What the bench scripts share: interleaved rounds, medians and percentiles, child processes
that are always cleaned up, and a small closed-loop HTTP load generator.

The load generator runs in its own process (`python bench/common.py load ...`, or `run_load`
from a script), so the client never shares an interpreter, and so a core, with the server
it measures. It sends a fixed number of requests per round over keep-alive connections and
reports every latency; nothing here decides what is fast enough.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def rotated(items: Sequence[T], round_index: int) -> list[T]:
    """`items` starting at a different one each round, so no target always runs first."""
    if not items:
        return []
    shift = round_index % len(items)
    return list(items[shift:]) + list(items[:shift])


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of `values`; NaN when there are none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, *, timeout: float = 20.0, process: subprocess.Popen[Any] | None = None
) -> None:
    """Block until 127.0.0.1:`port` accepts connections (or the process died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with status {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


class Children:
    """Child processes that are stopped when the block ends, also on Ctrl-C or SIGTERM.

    Each child gets its own process group so that stopping it never touches the bench
    itself, and only the processes started here are ever signalled.
    """

    def __init__(self) -> None:
        self._processes: list[subprocess.Popen[Any]] = []

    def start(
        self, argv: Sequence[str], *, log: Path | None = None, **kwargs: Any
    ) -> subprocess.Popen[Any]:
        out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen(
                list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, **kwargs
            )
        finally:
            if log is not None:
                out.close()  # type: ignore[union-attr]
        self._processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        for process in reversed(self._processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait(timeout=5)
        self._processes.clear()

    def __enter__(self) -> Children:
        # SIGTERM becomes SystemExit, so the `with` block unwinds and stop_all runs.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


@dataclass(frozen=True, slots=True)
class LoadResult:
    """One load run: `requests` timed requests, of which `failures` were not 200 or failed."""

    requests: int
    failures: int
    seconds: float
    latencies_ms: tuple[float, ...] = field(repr=False)
    failure_sample: str | None = None

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else math.nan

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99_ms(self) -> float:
        return percentile(self.latencies_ms, 99)


def run_load(
    url: str,
    *,
    body: bytes | None = None,
    concurrency: int,
    requests: int,
    warmup: int = 0,
    timeout: float = 60.0,
) -> LoadResult:
    """Run the load generator in a child process and return what it measured.

    POST with a JSON `body`, or GET when there is none. `warmup` requests run first on the
    same connections and are not counted.
    """
    argv = [
        sys.executable, str(Path(__file__).resolve()), "load", url,
        "--concurrency", str(concurrency), "--requests", str(requests),
        "--warmup", str(warmup), "--timeout", str(timeout),
    ]  # fmt: skip
    if body is not None:
        argv += ["--body", body.decode("utf-8")]
    done = subprocess.run(
        argv, capture_output=True, check=False, timeout=timeout * (requests + warmup) + 60
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr.decode(errors='replace')[-2000:]}")
    data = json.loads(done.stdout)
    return LoadResult(
        requests=data["requests"],
        failures=data["failures"],
        seconds=data["seconds"],
        latencies_ms=tuple(data["latencies_ms"]),
        failure_sample=data["failure_sample"],
    )


async def _generate(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    body = args.body.encode("utf-8") if args.body is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    method = "POST" if body is not None else "GET"
    connector = aiohttp.TCPConnector(limit=args.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    latencies: list[float] = []
    failures = 0
    failure_sample: str | None = None

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(record: bool) -> None:
            nonlocal failures, failure_sample
            started = time.perf_counter()
            try:
                async with session.request(method, args.url, data=body, headers=headers) as resp:
                    payload = await resp.read()
                    ok = resp.status == 200
                    if not ok and failure_sample is None:
                        failure_sample = f"HTTP {resp.status}: {payload[:300]!r}"
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                ok = False
                if failure_sample is None:
                    failure_sample = f"{type(exc).__name__}: {exc}"
            if record:
                latencies.append((time.perf_counter() - started) * 1000)
                failures += 0 if ok else 1

        async def worker(queue: Iterator[bool]) -> None:
            for record in queue:
                await one(record)

        async def phase(count: int, record: bool) -> None:
            shared = iter([record] * count)  # workers pull from one iterator: a fixed total
            await asyncio.gather(*(worker(shared) for _ in range(args.concurrency)))

        if args.warmup:
            await phase(args.warmup, record=False)
        started = time.perf_counter()
        await phase(args.requests, record=True)
        seconds = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "failures": failures,
        "seconds": seconds,
        "latencies_ms": latencies,
        "failure_sample": failure_sample,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="closed-loop HTTP load generator (JSON out)")
    sub = parser.add_subparsers(dest="command", required=True)
    load = sub.add_parser("load")
    load.add_argument("url")
    load.add_argument("--body", help="JSON request body (POST); none = GET")
    load.add_argument("--concurrency", type=int, default=1)
    load.add_argument("--requests", type=int, default=1000)
    load.add_argument("--warmup", type=int, default=0)
    load.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    result = asyncio.run(_generate(args))
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    main()
