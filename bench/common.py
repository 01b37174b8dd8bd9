"""What the bench scripts share: interleaved rounds, medians and percentiles, child processes
that are always cleaned up (nginx and `gateway serve` among them, with their files), and a
small closed-loop HTTP load generator.

The load generator runs in its own process (`LoadGenerator`, driven over pipes), so the
client never shares an interpreter, and so a core, with the server it measures. It sends a
fixed number of requests per run over keep-alive connections and reports every latency;
nothing here decides what is fast enough.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
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
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: every socket stays bound until all are picked, so the
    kernel cannot hand the same port out twice (picked one by one, a port just released may
    be the next one picked, and two of a bench's servers would then race for it)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


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


def wait_for_ports(
    folder: Path, waits: Sequence[tuple[subprocess.Popen[Any], int]], *, logs: Sequence[str]
) -> None:
    """Wait until each process listens on its port; else show the tail of each of `logs`
    (file names in `folder`) and exit."""
    try:
        for process, port in waits:
            wait_for_port(port, process=process, timeout=60)
    except RuntimeError as exc:
        for log in logs:
            if (folder / log).exists():
                print(f"--- {log}\n{(folder / log).read_text()[-3000:]}", file=sys.stderr)
        sys.exit(str(exc))


def nginx_binary() -> str:
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("nginx not found: install Debian's nginx-light (apt-get install -y nginx-light)")


def nginx_config(
    prefix: Path, page_port: int, *, tuning: Sequence[str] = (), servers: str = ""
) -> str:
    """One nginx worker serving `prefix`/www on `page_port`, its files under `prefix`;
    `tuning`: more http-level directives; `servers`: more blocks inside http."""
    temp = prefix / "nginx-temp"
    http = [
        "access_log off;",
        *tuning,
        "keepalive_requests 1000000;",
        "keepalive_timeout 75s;",
        *(f"{kind}_temp_path {temp}/{where};" for kind, where in _NGINX_TEMP_PATHS),
        "types { text/html html; }",
        "default_type application/octet-stream;",
        "charset utf-8;",
        f"server {{ listen 127.0.0.1:{page_port}; root {prefix}/www; }}",
    ]
    return (
        "daemon off;\n"
        "worker_processes 1;\n"
        f"pid {prefix}/nginx.pid;\n"
        f"error_log {prefix}/nginx-error.log warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n" + "".join(f"    {line}\n" for line in http) + servers + "}\n"
    )


_NGINX_TEMP_PATHS = (
    ("client_body", "body"),
    ("proxy", "proxy"),
    ("fastcgi", "fastcgi"),
    ("uwsgi", "uwsgi"),
    ("scgi", "scgi"),
)


def start_nginx(children: Children, folder: Path, config: str) -> subprocess.Popen[Any]:
    """nginx with `folder` as its prefix (config, temporary files, logs)."""
    (folder / "nginx-temp").mkdir(exist_ok=True)
    (folder / "nginx.conf").write_text(config)
    return children.start(
        [nginx_binary(), "-p", str(folder), "-c", str(folder / "nginx.conf"),
         "-e", str(folder / "nginx-error.log")],
        log=folder / "nginx.out",
    )  # fmt: skip


def write_page_policy(folder: Path, name: str, host: str, port: int, *, extra: str = "") -> None:
    """`bench-policy.yaml`: plain http to `host`:`port` (which resolves to loopback) only."""
    (folder / "bench-policy.yaml").write_text(
        f"version: 1\nname: {name}\ndefault: deny\nschemes: [http]\nports: [{port}]\n"
        f'domains:\n  allow: ["{host}"]\nnetworks:\n  allow: ["127.0.0.0/8"]\n'
        + textwrap.dedent(extra)
    )


def write_gateway_config(
    path: Path, *, port: int, instance: str, host: str, extra: str = ""
) -> Path:
    """A configuration for `gateway serve` on 127.0.0.1:`port` with `bench-policy.yaml`, its
    audit under `audit/`, and `host` resolved to 127.0.0.1; `extra`: more top-level keys."""
    path.write_text(
        f"listen: {{host: 127.0.0.1, port: {port}}}\ninstance_id: {instance}\n"
        f'policy: bench-policy.yaml\naudit: {{path: "audit/gateway-{{instance}}.jsonl"}}\n'
        + textwrap.dedent(extra)
        + f'resolver:\n  hosts:\n    {host}: ["127.0.0.1"]\n'
    )
    return path


def start_gateway(children: Children, config: Path, *, log: Path) -> subprocess.Popen[Any]:
    """`gateway serve --config` from this checkout, in the configuration's folder."""
    return children.start(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        log=log,
        cwd=config.parent,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of `root` and its descendants, from /proc."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


def py_spy_binary(folder: Path) -> str:
    found = shutil.which("py-spy")
    if found:
        return found
    target = folder / "py-spy"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "py-spy"],
        check=True,
    )
    return str(target / "bin" / "py-spy")


def frame_name(frame: str) -> str:
    """`func (path/to/file.py:123)` -> `func (short/file.py)`, so lines of one function merge."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/gateway/", "/lib/python3"):
        if marker in path:
            path = path[path.index(marker) + (1 if marker.startswith("/") else 0) :]
            break
    return f"{name} ({path})"


def profile_counts(raw: Path) -> tuple[Counter[str], Counter[str], int]:
    """From py-spy's raw output: samples by function including callees, samples by the
    function on top of the stack, and the total."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [frame_name(f) for f in stack.split(";")]
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    return inclusive, own, total


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


class LoadGenerator:
    """A load-generator child process that runs one load after another, on request.

    One process serves a whole bench (starting Python and aiohttp for every cell would cost
    more than many cells). Each `run` opens fresh keep-alive connections, sends `warmup`
    untimed requests, calls `on_warm()` (e.g. to read the target's CPU counters), then sends
    `requests` timed ones; POST with a JSON `body`, or GET when there is none; `headers` are
    added to every request.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> LoadGenerator:
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "serve-load"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def run(
        self,
        url: str,
        *,
        body: bytes | None = None,
        concurrency: int,
        requests: int,
        warmup: int = 0,
        timeout: float = 60.0,
        on_warm: Callable[[], object] | None = None,
        headers: dict[str, str] | None = None,
    ) -> LoadResult:
        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise RuntimeError("the load generator is not running (use it in a with block)")
        command = {
            "url": url,
            "body": body.decode("utf-8") if body is not None else None,
            "concurrency": concurrency,
            "requests": requests,
            "warmup": warmup,
            "timeout": timeout,
            "headers": headers or {},
        }
        process.stdin.write(json.dumps(command) + "\n")
        process.stdin.flush()
        if process.stdout.readline().strip() != "warm":
            raise RuntimeError(f"the load generator stopped (status {process.poll()})")
        if on_warm is not None:
            on_warm()
        process.stdin.write("go\n")
        process.stdin.flush()
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the load generator stopped (status {process.poll()})")
        data = json.loads(line)
        return LoadResult(
            requests=data["requests"],
            failures=data["failures"],
            seconds=data["seconds"],
            latencies_ms=tuple(data["latencies_ms"]),
            failure_sample=data["failure_sample"],
        )


def run_load(url: str, **options: Any) -> LoadResult:
    """One load run in a fresh load-generator process (`options` as for LoadGenerator.run)."""
    with LoadGenerator() as generator:
        return generator.run(url, **options)


async def _generate(
    command: dict[str, Any], wait_go: Callable[[], Awaitable[None]]
) -> dict[str, Any]:
    import aiohttp

    url: str = command["url"]
    concurrency: int = command["concurrency"]
    body = command["body"].encode("utf-8") if command["body"] is not None else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    headers.update(command.get("headers") or {})  # e.g. Authorization
    method = "POST" if body is not None else "GET"
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=command["timeout"])
    latencies: list[float] = []
    failures = 0
    failure_sample: str | None = None

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(record: bool) -> None:
            nonlocal failures, failure_sample
            started = time.perf_counter()
            try:
                async with session.request(method, url, data=body, headers=headers) as resp:
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
            await asyncio.gather(*(worker(shared) for _ in range(concurrency)))

        await phase(command["warmup"], record=False)
        await wait_go()
        started = time.perf_counter()
        await phase(command["requests"], record=True)
        seconds = time.perf_counter() - started
    return {
        "requests": len(latencies),
        "failures": failures,
        "seconds": seconds,
        "latencies_ms": latencies,
        "failure_sample": failure_sample,
    }


async def _serve_load() -> None:
    """Commands on stdin, one JSON line each; answers "warm", waits for "go", then the result."""
    loop = asyncio.get_running_loop()

    async def read_line() -> str:
        return await loop.run_in_executor(None, sys.stdin.readline)

    async def wait_go() -> None:
        sys.stdout.write("warm\n")
        sys.stdout.flush()
        await read_line()

    while line := await read_line():
        result = await _generate(json.loads(line), wait_go)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


def main() -> None:
    if sys.argv[1:] != ["serve-load"]:
        sys.exit("usage: common.py serve-load  (driven by LoadGenerator; JSON lines on stdin)")
    asyncio.run(_serve_load())


if __name__ == "__main__":
    main()
