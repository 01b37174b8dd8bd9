"""Replicas: two gateway processes behind a local nginx load balancer against one, same load,
same run, with shared rate limiting on; and the Redis round trips each request costs.

Every server runs in its own process on loopback, from a temporary folder removed at exit
(with every process this script started):
- `redis-server` (no persistence), the shared state of both replicas;
- two `gateway serve --config …` replicas (`replica-a`, `replica-b`), each with
  `state.redis` set and one client whose token has `requests_per_minute` and `concurrent`
  limits (high enough never to refuse, so every request takes the shared-limiter path);
- one nginx (1 worker) that serves a small page (the upstream the gateways fetch), and two
  load-balancer ports with keep-alive upstream pools: `1 replica` (replica-a alone) and
  `2 replicas` (replica-a and replica-b, round robin).

The load: `POST /v1/fetch` of the small page with the client's bearer token, from one
load-generator process (bench/common.py), a fixed number of requests per cell, both targets
in each round in an order rotated per round; the table shows the medians over rounds of
req/s and p99. Redis `INFO commandstats` is read after the warm-up and after the timed
requests of each cell. Redis counts there also the commands a script runs inside Redis, so
a census first sends some requests through both replicas with a MONITOR connection open: it
shows which commands arrive from clients (round trips) and which only run inside scripts
(`lua`). A cell's round trips are its commands minus the script-only ones (the bench's own
INFO excluded); the target is at most 1 per request on this common path.

    .venv/bin/python bench/replicas.py [--rounds 3] [--requests 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from common import (
    Children,
    LoadGenerator,
    LoadResult,
    free_ports,
    median,
    nginx_config,
    rotated,
    start_gateway,
    start_nginx,
    wait_for_port,
    wait_for_ports,
    write_gateway_config,
    write_page_policy,
)

HOST = "page.example.com"  # mapped to 127.0.0.1 by the gateways' resolver.hosts
PAGE_PATH = "/small.html"
TOKEN = "bench-replicas-token-0123456789abcdef"
ONE, TWO = "1 replica", "2 replicas"
REPLICAS = ("replica-a", "replica-b")
ROUND_TRIP_TARGET = 1.0
# The bench's own reads of the counters are not the gateway's traffic.
OWN_COMMANDS = frozenset({"info", "monitor"})
CENSUS_REQUESTS = 400
# A MONITOR line: +<time> [<db> <client address>|lua] "<command>" ...
MONITOR_LINE = re.compile(rb'^\+[0-9.]+ \[[0-9]+ (lua|[^\]]+)\] "([^"]+)"(?: "([^"]*)")?')
# Not per request: a new connection's handshake, loading a script once, the liveness ping.
SET_UP = frozenset({"hello", "client", "script", "select", "auth", "ping"})


def script_names() -> dict[str, str]:
    """The SHA-1 by which the replicas call each limiter script (EVALSHA)."""
    from gateway.state import limiter

    scripts = {"acquire": limiter.ACQUIRE, "release": limiter.RELEASE, "renew": limiter.RENEW}
    return {hashlib.sha1(text.encode()).hexdigest(): name for name, text in scripts.items()}


SCRIPTS = script_names()


def small_page() -> bytes:
    paragraphs = "".join(
        f"<p>Paragraph {n}: an egress gateway decides, records and marks what agents fetch.</p>"
        for n in range(20)
    )
    return (
        "<!doctype html><html><head><title>Small page</title></head>"
        f"<body><h1>Small page</h1>{paragraphs}</body></html>"
    ).encode()


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        sys.exit("redis-server not found: apt-get install -y redis-server")
    return found


def balancers_config(
    prefix: Path, page_port: int, lb_ports: dict[str, int], replicas: list[int]
) -> str:
    """The page server, and a keep-alive load balancer port for each pool of replicas."""
    pools = {ONE: replicas[:1], TWO: replicas}
    upstreams = "".join(
        f"    upstream pool{index} {{\n"
        + "".join(f"        server 127.0.0.1:{port};\n" for port in pools[name])
        + "        keepalive 64;\n    }\n"
        for index, name in enumerate((ONE, TWO))
    )
    balancers = "".join(
        f"""\
    server {{
        listen 127.0.0.1:{lb_ports[name]};
        location / {{
            proxy_pass http://pool{index};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
"""
        for index, name in enumerate((ONE, TWO))
    )
    return nginx_config(prefix, page_port, servers=upstreams + balancers)


def gateway_config(folder: Path, name: str, port: int, page_port: int, redis_port: int) -> Path:
    write_page_policy(folder, "bench-replicas", HOST, page_port)
    token_sha256 = hashlib.sha256(TOKEN.encode()).hexdigest()
    return write_gateway_config(
        folder / f"{name}.yaml",
        port=port,
        instance=name,
        host=HOST,
        extra=f"""\
            clients:
              - id: bench-agent
                token_sha256: "{token_sha256}"
                limits: {{requests_per_minute: 100000000, concurrent: 100000}}
            state: {{redis: "redis://127.0.0.1:{redis_port}/0", on_failure: closed}}
            """,
    )


def command_counts(redis_port: int) -> Counter[str]:
    import redis

    client = redis.Redis(port=redis_port, host="127.0.0.1")
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    counts: Counter[str] = Counter()
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        if name not in OWN_COMMANDS:
            counts[name] = int(value["calls"])
    return counts


class Monitor:
    """A MONITOR connection read on a thread: commands by name, from clients or from scripts."""

    def __init__(self, port: int) -> None:
        self.from_clients: Counter[str] = Counter()
        self.from_scripts: Counter[str] = Counter()
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self._sock.sendall(b"MONITOR\r\n")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sock.close()

    def _read(self) -> None:
        self._sock.settimeout(0.2)
        buffer = b""
        while not self._stop.is_set():
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return
            *lines, buffer = (buffer + chunk).split(b"\r\n")
            for line in lines:
                match = MONITOR_LINE.match(line)
                if match:
                    source, name = match.group(1), match.group(2).decode().lower()
                    if name == "evalsha" and match.group(3):
                        name += ":" + SCRIPTS.get(match.group(3).decode(), "other")
                    (self.from_scripts if source == b"lua" else self.from_clients)[name] += 1


@dataclass(frozen=True, slots=True)
class Cell:
    result: LoadResult
    commands: Counter[str]
    script_only: frozenset[str]

    @property
    def round_trips(self) -> float:
        sent = sum(n for name, n in self.commands.items() if name not in self.script_only)
        return sent / max(self.result.requests, 1)


def check(url: str, body: bytes) -> None:
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    if "Paragraph 19" not in answer.get("content", ""):
        sys.exit(f"{url}: the gateway did not return the page: {str(answer)[:300]}")


def census(generator: LoadGenerator, url: str, body: bytes, redis_port: int) -> Monitor:
    """Which commands reach Redis from the replicas, and which only run inside scripts."""
    with Monitor(redis_port) as monitor:
        result = generator.run(
            url,
            body=body,
            concurrency=4,
            requests=CENSUS_REQUESTS,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    if result.failures:
        sys.exit(f"census: {result.failures} requests failed ({result.failure_sample})")
    sent = monitor.from_clients
    for name in OWN_COMMANDS:
        sent.pop(name, None)
    by_name = ", ".join(f"{n} {c}" for n, c in sent.most_common())
    inside = ", ".join(f"{n} {c}" for n, c in monitor.from_scripts.most_common())
    print(
        f"census (MONITOR, {CENSUS_REQUESTS} requests through 2 replicas): from the replicas "
        f"{by_name}; run inside scripts: {inside}",
        flush=True,
    )
    # A burst's last releases are given back by one call RELEASE_DELAY_S after it ends.
    occasional = sum(n for name, n in sent.items() if name in SET_UP or name == "evalsha:release")
    common = (sum(sent.values()) - occasional) / CENSUS_REQUESTS
    verdict = "met" if common <= ROUND_TRIP_TARGET else "MISSED"
    print(
        f"redis round trips per request on the common path: {common:.3f} "
        f"(target <= {ROUND_TRIP_TARGET:g}: {verdict}); besides, over the census: "
        f"{sent['evalsha:release']} release flushes after idle gaps, "
        f"{occasional - sent['evalsha:release']} connection set-ups, script loads and pings",
        flush=True,
    )
    return monitor


def measure(
    generator: LoadGenerator,
    url: str,
    body: bytes,
    redis_port: int,
    args: argparse.Namespace,
    script_only: frozenset[str],
) -> Cell:
    before: Counter[str] = Counter()

    def snapshot() -> None:
        time.sleep(0.1)  # the warm-up's last releases are flushed before the window opens
        before.update(command_counts(redis_port))

    result = generator.run(
        url,
        body=body,
        concurrency=args.concurrency,
        requests=args.requests,
        warmup=max(args.requests // 10, args.concurrency),
        on_warm=snapshot,
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    after = command_counts(redis_port)
    delta = Counter({k: after[k] - before[k] for k in after if after[k] > before[k]})
    return Cell(result, delta, script_only)


def report(cells: dict[str, list[Cell]], args: argparse.Namespace) -> None:
    print(
        f"\nPOST /v1/fetch of a {len(small_page())} B page, shared rate limiting on, "
        f"c={args.concurrency}, {args.requests} requests per cell, median of {args.rounds} rounds"
    )
    print(f"| {'target':<10} | {'req/s':>8} | {'p50 ms':>7} | {'p99 ms':>7} | "
          f"{'redis trips/req':>15} | {'failed':>6} |")  # fmt: skip
    print(f"|{'-' * 12}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 17}|{'-' * 8}|")
    for name in (ONE, TWO):
        runs = cells[name]
        rps = median([c.result.rps for c in runs])
        p50 = median([c.result.p50_ms for c in runs])
        p99 = median([c.result.p99_ms for c in runs])
        trips = median([c.round_trips for c in runs])
        failed = sum(c.result.failures for c in runs)
        print(f"| {name:<10} | {rps:>8.0f} | {p50:>7.2f} | {p99:>7.2f} | {trips:>15.3f} | "
              f"{failed:>6} |")  # fmt: skip
    ratios = [t.result.rps / o.result.rps for o, t in zip(cells[ONE], cells[TWO], strict=True)]
    print(f"\n2 replicas / 1 replica req/s (median of per-round ratios): {median(ratios):.2f}")
    everything: Counter[str] = Counter()
    requests = 0
    for runs in cells.values():
        for cell in runs:
            everything.update(cell.commands)
            requests += cell.result.requests
    per_command = ", ".join(
        f"{name} {count / requests:.3f}" for name, count in everything.most_common()
    )
    worst = max(c.round_trips for runs in cells.values() for c in runs)
    print(f"redis commands per request, all cells (scripts' inner commands too): {per_command}")
    print(f"redis round trips per request, everything counted: at most {worst:.3f} in any cell")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000, help="per cell per round")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as temp, Children() as children:
        folder = Path(temp)
        folder.chmod(0o755)  # nginx workers may run as another user
        (folder / "www").mkdir()
        (folder / "www" / PAGE_PATH.lstrip("/")).write_bytes(small_page())
        redis_port, page_port, lb_one, lb_two, *replica_ports = free_ports(4 + len(REPLICAS))
        lb_ports = {ONE: lb_one, TWO: lb_two}
        redis = children.start(
            [redis_binary(), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(folder)],
            log=folder / "redis.log",
        )  # fmt: skip
        wait_for_port(redis_port, process=redis)
        config = balancers_config(folder, page_port, lb_ports, replica_ports)
        nginx = start_nginx(children, folder, config)
        replicas = [
            start_gateway(
                children,
                gateway_config(folder, name, port, page_port, redis_port),
                log=folder / f"{name}.log",
            )
            for name, port in zip(REPLICAS, replica_ports, strict=True)
        ]
        wait_for_ports(
            folder,
            [(nginx, page_port), *zip(replicas, replica_ports, strict=True)],
            logs=("nginx-error.log", *(f"{name}.log" for name in REPLICAS)),
        )

        body = json.dumps({"url": f"http://{HOST}:{page_port}{PAGE_PATH}"}).encode()
        urls = {name: f"http://127.0.0.1:{port}/v1/fetch" for name, port in lb_ports.items()}
        for url in urls.values():
            check(url, body)
        cells: dict[str, list[Cell]] = {ONE: [], TWO: []}
        with LoadGenerator() as generator:
            monitor = census(generator, urls[TWO], body, redis_port)
            script_only = frozenset(set(monitor.from_scripts) - set(monitor.from_clients))
            for round_index in range(args.rounds):
                for name in rotated([ONE, TWO], round_index):
                    cell = measure(generator, urls[name], body, redis_port, args, script_only)
                    cells[name].append(cell)
                    print(
                        f"round {round_index + 1} {name}: {cell.result.rps:.0f} req/s, "
                        f"p99 {cell.result.p99_ms:.2f} ms, {cell.round_trips:.3f} redis trips/req, "
                        f"{cell.result.failures} failed"
                        + (
                            f" ({cell.result.failure_sample})" if cell.result.failure_sample else ""
                        ),
                        flush=True,
                    )
        report(cells, args)


if __name__ == "__main__":
    main()
