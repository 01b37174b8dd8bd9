"""The forward proxy against its peers: absolute-form GET of a 1 KB and a ~100 KB page at
concurrency 1 and 64, CONNECT throughput with 1 MB bodies, and memory per idle keep-alive
connection.

Targets, in the same run, interleaved, order rotated each round, medians of the rounds:
nginx directly; the gateway's proxy (`gateway serve --proxy-port`, policy and audit on);
a bare aiohttp relay and a bare asyncio CONNECT relay (yardsticks, no policy); squid,
tinyproxy (Debian: `apt-get install -y nginx-light squid tinyproxy`) and proxy.py (PyPI:
`pip install -e '.[bench]'` puts its `proxy` script beside the venv's python, or set
PROXYPY to a `proxy` script elsewhere). Missing peers are skipped with that hint. The
absolute-form load is a raw asyncio client in its own process, or with `--load wrk` wrk
(Debian `wrk`) as the research note measured the peers: the asyncio client costs the box
more per request, which favours the peers that spend least per request (squid). Also
`gateway-w2`, the gateway with
`listen.workers: 2` (and the redis-server workers need), and with `--baseline CHECKOUT` the
gateway of another checkout (e.g. `git worktree add --detach ../base <commit>`) as
`gateway-base`, for a before/after in one run. Every cell also reads the target's CPU.

    .venv/bin/python bench/proxy.py [--rounds 3] [--requests 3000 | --duration 5] [--load wrk]
        [--sizes 1k 100k] [--idle 1000] [--quick] [--baseline CHECKOUT] [--workers 2]
        [--only NAME ...] [--no-idle] [--connect-only] [--profile [--profile-size 1k]]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    Children,
    free_port,
    free_ports,
    median,
    percentile,
    profile_counts,
    py_spy_binary,
    rotated,
    tree_cpu_seconds,
    wait_for_port,
)

HOST = "bench.example.com"
CURL = shutil.which("curl")  # the CONNECT load, as measured in the research note
WRK = shutil.which("wrk")  # `--load wrk`: the absolute-form load as the research note made it
# wrk asks the proxy for an absolute-form URL through this script, and prints its summary as
# one JSON line (wrk's own text report is for people). Read errors are not failures: wrk
# counts one when a peer closes after its response (tinyproxy, every time), and reconnects,
# as the asyncio load does.
WRK_SCRIPT = """\
wrk.method = "GET"
wrk.path = os.getenv("WRK_TARGET_URL")
wrk.headers["Host"] = os.getenv("WRK_TARGET_HOST")
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"non2xx":%d,"errors":%d,"p50":%f,"p99":%f}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.write + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
"""
PAGE = 100 * 1024
BIG = 1024 * 1024
# The absolute-form cells' pages: a small one (an API call, a package index entry) and a page.
PAGES = {"1k": ("/1k.html", "1 KB"), "100k": ("/100k.html", "100 KB")}
HINT_DEBIAN = "apt-get install -y nginx-light squid tinyproxy"
HINT_PROXYPY = "pip install -e '.[bench]' (or set PROXYPY to a proxy.py `proxy` script)"


# --- the load generator (child process) -------------------------------------------------


class _Client(asyncio.Protocol):
    """One keep-alive connection that sends `request` and reads Content-Length responses."""

    def __init__(self, request: bytes, done: asyncio.Future[None] | None = None) -> None:
        self.request = request
        self.buffer = bytearray()
        self.need: int | None = None
        self.waiter: asyncio.Future[int] | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._check()

    def _check(self) -> None:
        if self.need is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line[15:])
            self.need = end + 4 + length
            self.status = status
        if len(self.buffer) >= self.need:
            del self.buffer[: self.need]
            self.need = None
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(self.status)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))
        if not self.closed.done():
            self.closed.set_result(None)

    async def fetch(self) -> int:
        self.waiter = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(self.request)
        return await self.waiter


async def _connect(port: int, request: bytes, connect_to: str | None) -> _Client:
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(lambda: _Client(request), "127.0.0.1", port)
    if connect_to is not None:
        assert client.transport is not None
        client.waiter = loop.create_future()
        head = f"CONNECT {connect_to} HTTP/1.1\r\nHost: {connect_to}\r\n\r\n".encode()
        client.transport.write(head)
        # a CONNECT answer is a head without a body: parsed as a response of length 0
        status = await client.waiter
        if status != 200:
            raise RuntimeError(f"CONNECT refused with {status}")
        client.waiter = None
    return client


async def _http_load(cmd: dict[str, Any]) -> dict[str, Any]:
    request = cmd["request"].encode("latin-1")
    latencies: list[float] = []
    failures = 0
    # `duration`: the cell runs that many seconds after its warmup requests, however many
    # requests that takes; else exactly `requests` after them.
    duration = cmd.get("duration")
    remaining = [cmd["warmup"] + (cmd["requests"] if duration is None else 1 << 62)]
    deadline = [float("inf")]
    sent = [0]

    async def worker() -> None:
        nonlocal failures
        client: _Client | None = None
        while remaining[0] > 0 and time.perf_counter() < deadline[0]:
            remaining[0] -= 1
            sent[0] += 1
            if duration is not None and sent[0] == cmd["warmup"] + 1:
                deadline[0] = time.perf_counter() + duration
            started = time.perf_counter()
            ok = False
            for _attempt in (1, 2):  # a server that closes after each response (tinyproxy)
                try:  # costs a reconnect, as wrk counts it, not a failure
                    if client is None or client.transport is None or client.transport.is_closing():
                        client = await _connect(cmd["port"], request, None)
                    ok = await client.fetch() == 200
                    break
                except (ConnectionError, OSError):
                    client = None
            timed = deadline[0] != float("inf") if duration else remaining[0] < cmd["requests"]
            if timed:
                latencies.append((time.perf_counter() - started) * 1000)
                failures += 0 if ok else 1
        if client is not None and client.transport is not None:
            client.transport.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(cmd["concurrency"])))
    seconds = time.perf_counter() - started
    if duration is not None and deadline[0] != float("inf"):
        seconds = time.perf_counter() - (deadline[0] - duration)  # the timed part only
    return {"latencies": latencies, "failures": failures, "seconds": seconds, "sent": sent[0]}


async def _tunnel_load(cmd: dict[str, Any]) -> dict[str, Any]:
    request = cmd["request"].encode("latin-1")
    client = await _connect(cmd["port"], request, cmd["connect_to"])
    for _ in range(3):
        await client.fetch()
    times = []
    started = time.perf_counter()
    for _ in range(cmd["requests"]):
        one = time.perf_counter()
        if await client.fetch() != 200:
            raise RuntimeError(
                f"non-200 through the tunnel of {cmd['connect_to']} on port {cmd['port']}"
            )
        times.append((time.perf_counter() - one) * 1000)
    seconds = time.perf_counter() - started
    assert client.transport is not None
    client.transport.close()
    return {"latencies": times, "failures": 0, "seconds": seconds}


async def _hold_idle(cmd: dict[str, Any], wait: Any) -> dict[str, Any]:
    request = cmd["request"].encode("latin-1")
    clients = []
    for _ in range(cmd["connections"]):
        client = await _connect(cmd["port"], request, None)
        await client.fetch()
        clients.append(client)
    open_count = sum(1 for c in clients if c.transport and not c.transport.is_closing())
    await wait({"held": open_count})
    for client in clients:
        if client.transport is not None:
            client.transport.close()
    return {"released": len(clients)}


async def _serve_load() -> None:
    loop = asyncio.get_running_loop()

    async def read_line() -> str:
        return await loop.run_in_executor(None, sys.stdin.readline)

    async def wait(message: dict[str, Any]) -> None:
        print(json.dumps(message), flush=True)
        await read_line()

    while line := await read_line():
        cmd = json.loads(line)
        if cmd["kind"] == "http":
            result = await _http_load(cmd)
        elif cmd["kind"] == "tunnel":
            result = await _tunnel_load(cmd)
        else:
            result = await _hold_idle(cmd, wait)
        print(json.dumps(result), flush=True)


class Load:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "load"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(cmd) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the load generator died")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def release(self) -> dict[str, Any]:
        return self.ask({})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


# --- yardsticks (child processes) -------------------------------------------------------


def run_relay(port: int) -> None:
    """A bare aiohttp absolute-form relay: no policy, no audit, one client session."""
    import aiohttp
    from aiohttp import web

    async def relay(request: web.Request) -> web.StreamResponse:
        session: aiohttp.ClientSession = request.app["session"]
        async with session.get(str(request.url), allow_redirects=False) as upstream:
            response = web.StreamResponse(status=upstream.status)
            for name in ("Content-Type", "Content-Length"):
                if name in upstream.headers:
                    response.headers[name] = upstream.headers[name]
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def session_ctx(app: web.Application) -> Any:
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
            app["session"] = session
            yield

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", relay)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def run_tunnel(port: int) -> None:
    """A bare asyncio CONNECT relay with flow control both ways (no policy, no audit)."""

    class Side(asyncio.Protocol):
        def __init__(self) -> None:
            self.peer: Side | None = None
            self.transport: asyncio.Transport | None = None
            self.head = bytearray()
            self.opening: asyncio.Future[None] | None = None  # kept: a task nobody holds may vanish

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]

        def data_received(self, data: bytes) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.write(data)
                return
            self.head += data
            if b"\r\n\r\n" in self.head:
                target = self.head.split(b" ", 2)[1].decode()
                host, _, port_text = target.rpartition(":")
                assert self.transport is not None
                self.transport.pause_reading()
                self.opening = asyncio.ensure_future(self.open(host, int(port_text)))

        async def open(self, host: str, port: int) -> None:
            loop = asyncio.get_running_loop()
            _, upstream = await loop.create_connection(Side, host, port)
            upstream.peer, self.peer = self, upstream
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            self.transport.resume_reading()

        def pause_writing(self) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.pause_reading()

        def resume_writing(self) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.resume_reading()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.peer is not None and self.peer.transport is not None:
                self.peer.transport.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Side, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


# --- targets ----------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    port: int
    pid: int
    proxy: bool = True  # absolute-form; False: origin-form (nginx itself)
    host: str = "127.0.0.1"  # what the target is asked for (the gateway needs a policy name)
    tunnels: bool = True
    http: bool = True


def nginx_conf(prefix: Path, port: int) -> str:
    temp = prefix / "tmp"
    return textwrap.dedent(
        f"""\
        daemon off;
        worker_processes 1;
        pid {prefix}/nginx.pid;
        error_log {prefix}/nginx-error.log warn;
        events {{ worker_connections 8192; }}
        http {{
            access_log off; sendfile on; tcp_nopush off; tcp_nodelay on;
            keepalive_requests 1000000; keepalive_timeout 300s;
            client_body_temp_path {temp}/b; proxy_temp_path {temp}/p;
            fastcgi_temp_path {temp}/f; uwsgi_temp_path {temp}/u; scgi_temp_path {temp}/s;
            default_type application/octet-stream;
            server {{ listen 127.0.0.1:{port}; root {prefix}/www; }}
        }}
        """
    )


def start_gateway(
    children: Children,
    folder: Path,
    nginx_port: int,
    *,
    name: str,
    repo: Path,
    workers: int = 1,
    redis_port: int | None = None,
) -> Target:
    """A `gateway serve` from `repo` (this checkout, or an older one for a same-run
    comparison) with policy (10 domain rules, private-address guard) and audit on."""
    home = folder / name
    home.mkdir()
    gw_port, gw_proxy = free_ports(2)
    allow = ", ".join([f'"{HOST}"'] + [f'"site{i}.example.org"' for i in range(9)])
    (home / "policy.yaml").write_text(
        textwrap.dedent(
            f"""\
            name: bench-proxy
            default: deny
            schemes: [http, https]
            ports: [80, 443, {nginx_port}]
            domains: {{allow: [{allow}]}}
            networks: {{allow: ["127.0.0.0/8"]}}
            """
        )
    )
    (home / "gateway.yaml").write_text(
        textwrap.dedent(
            f"""\
            listen: {{host: 127.0.0.1, port: {gw_port}, proxy_port: {gw_proxy}, workers: {workers}}}
            instance_id: bench
            policy: policy.yaml
            audit: {{path: "audit/gateway-{{instance}}.jsonl"}}
            resolver: {{hosts: {{{HOST}: ["127.0.0.1"]}}}}
            proxy: {{connect_ports: [{nginx_port}], require_tls: false}}
            server: {{max_connections_per_ip: 5000}}
            """
        )
        # several workers share limits, caches and search ids only through Redis
        + (f'state: {{redis: "redis://127.0.0.1:{redis_port}/0"}}\n' if redis_port else "")
    )
    process = children.start(
        [sys.executable, "-m", "gateway", "serve", "--config", str(home / "gateway.yaml")],
        log=home / "gateway.log",
        cwd=repo,
    )
    wait_for_port(gw_proxy, process=process, timeout=30)
    return Target(name, gw_proxy, process.pid, host=HOST)


def start_targets(
    children: Children, folder: Path, nginx_port: int, args: Any
) -> tuple[list[Target], list[str]]:
    targets: list[Target] = []
    skipped: list[str] = []
    python = sys.executable
    repo = Path(__file__).resolve().parent.parent

    targets.append(start_gateway(children, folder, nginx_port, name="gateway", repo=repo))
    if args.baseline:
        targets.append(
            start_gateway(
                children, folder, nginx_port, name="gateway-base", repo=Path(args.baseline)
            )
        )
    redis_server = shutil.which("redis-server") if args.workers > 1 else None
    if args.workers > 1 and redis_server is None:
        skipped.append(
            f"gateway-w{args.workers} (needs redis-server: apt-get install -y redis-server)"
        )
    elif redis_server is not None:
        redis_port = free_port()
        redis = children.start(
            [redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""],
            log=folder / "redis.log",
        )
        wait_for_port(redis_port, process=redis)
        targets.append(
            start_gateway(
                children,
                folder,
                nginx_port,
                name=f"gateway-w{args.workers}",
                repo=repo,
                workers=args.workers,
                redis_port=redis_port,
            )
        )

    relay_port = free_port()
    relay = children.start([python, __file__, "relay", str(relay_port)], log=folder / "relay.log")
    wait_for_port(relay_port, process=relay)
    targets.append(Target("aiohttp-relay", relay_port, relay.pid, tunnels=False))

    tunnel_port = free_port()
    tunnel = children.start([python, __file__, "tunnel", str(tunnel_port)], log=folder / "t.log")
    wait_for_port(tunnel_port, process=tunnel)
    targets.append(Target("asyncio-tunnel", tunnel_port, tunnel.pid, http=False))

    squid = shutil.which("squid") or (
        "/usr/sbin/squid" if os.path.exists("/usr/sbin/squid") else None
    )
    if squid:
        port = free_port()
        (folder / "squid").mkdir()
        acl = "\n".join(f"acl sites dstdomain site{i}.example.org" for i in range(9))
        (folder / "squid.conf").write_text(
            textwrap.dedent(
                f"""\
                http_port 127.0.0.1:{port}
                pid_filename {folder}/squid.pid
                cache_log {folder}/squid/cache.log
                access_log none
                cache deny all
                coredump_dir {folder}/squid
                acl allowed dst 127.0.0.1
                acl CONNECT method CONNECT
                shutdown_lifetime 1 seconds
                """
            )
            + acl
            + "\nhttp_access allow allowed\nhttp_access allow sites\nhttp_access deny all\n"
        )
        process = children.start(
            [squid, "-N", "-f", str(folder / "squid.conf")], log=folder / "squid.log"
        )
        wait_for_port(port, process=process, timeout=30)
        targets.append(Target("squid", port, process.pid))
    else:
        skipped.append(f"squid (install: {HINT_DEBIAN})")

    tinyproxy = shutil.which("tinyproxy") or (
        "/usr/bin/tinyproxy" if os.path.exists("/usr/bin/tinyproxy") else None
    )
    if tinyproxy:
        port = free_port()
        (folder / "tinyproxy.conf").write_text(
            textwrap.dedent(
                f"""\
                Port {port}
                Listen 127.0.0.1
                Timeout 600
                MaxClients 4000
                LogLevel Critical
                ConnectPort {nginx_port}
                """
            )
        )
        process = children.start(
            [tinyproxy, "-d", "-c", str(folder / "tinyproxy.conf")], log=folder / "tinyproxy.log"
        )
        wait_for_port(port, process=process)
        targets.append(Target("tinyproxy", port, process.pid))
    else:
        skipped.append(f"tinyproxy (install: {HINT_DEBIAN})")

    proxypy = (
        os.environ.get("PROXYPY")
        or shutil.which("proxy", path=os.path.dirname(sys.executable))
        or shutil.which("proxy")
    )
    if proxypy:
        port = free_port()
        process = children.start(
            [proxypy, "--hostname", "127.0.0.1", "--port", str(port), "--log-level", "ERROR"],
            log=folder / "proxypy.log",
        )
        wait_for_port(port, process=process, timeout=30)
        targets.append(Target("proxy.py", port, process.pid))
    else:
        skipped.append(f"proxy.py (install: {HINT_PROXYPY})")
    return targets, skipped


def tree_pss_kb(root: int) -> int:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
                parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


def curl_tunnel(target: Target, nginx_port: int, requests: int) -> dict[str, Any]:
    """`curl -p -x`: one tunnel, `requests` sequential GETs of the 1 MB file through it (plus
    3 untimed), as the research note measured CONNECT; times per transfer from curl itself."""
    url = f"http://{target.host}:{nginx_port}/1m.bin"
    # nginx itself (no proxy): the floor any tunnel adds to, for context
    via = ["-p", "-x", f"http://127.0.0.1:{target.port}"] if target.proxy else []
    command = [
        "curl", "-s", *via, "--noproxy", "", "-w", "%{http_code} %{time_total} %{size_download}\n",
    ]  # fmt: skip
    for _ in range(requests + 3):
        command += ["-o", "/dev/null", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    if len(lines) != requests + 3 or any(
        code != "200" or int(size) != BIG for code, _, size in lines
    ):
        raise RuntimeError(f"curl through {target.name}: {done.stdout[-300:]} {done.stderr[-300:]}")
    times = [float(seconds) * 1000 for _, seconds, _ in lines[3:]]
    return {"latencies": times, "failures": 0, "seconds": sum(times) / 1000}


def request_for(target: Target, nginx_port: int, path: str) -> str:
    if not target.proxy:
        return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    authority = f"{target.host}:{nginx_port}"
    return f"GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\n\r\n"


def main() -> None:
    if sys.argv[1:2] == ["load"]:
        asyncio.run(_serve_load())
        return
    if sys.argv[1:2] in (["relay"], ["tunnel"]):
        (run_relay if sys.argv[1] == "relay" else run_tunnel)(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        default=float(os.environ.get("DURATION", 0) or 0),
        help="run each absolute-form cell this long instead of --requests (env DURATION)",
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        choices=sorted(PAGES),
        default=["1k", "100k"],
        help="the absolute-form pages measured (default both)",
    )
    parser.add_argument(
        "--load",
        choices=("asyncio", "wrk"),
        default="asyncio",
        help="the absolute-form load generator: this script's asyncio client, or wrk (Debian:"
        " apt-get install -y wrk) with a Lua script, as the research note measured",
    )
    parser.add_argument("--tunnel-requests", type=int, default=100)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="tiny run (tests, smoke)")
    parser.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        help="also run the gateway of this checkout (e.g. a git worktree of an older commit)"
        " as gateway-base, interleaved with this one",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="also run a gateway with listen.workers: N (0: no)"
    )
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="measure only these targets (nginx always)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="afterwards, py-spy each single-process gateway under c=64 load",
    )
    parser.add_argument(
        "--profile-out", metavar="DIR", help="keep py-spy's raw samples (one file per load) here"
    )
    parser.add_argument(
        "--profile-size",
        choices=sorted(PAGES),
        default="100k",
        help="the page of the profile's absolute-form load",
    )
    parser.add_argument("--no-idle", action="store_true", help="skip the idle-memory cells")
    parser.add_argument("--connect-only", action="store_true", help="only the CONNECT cells")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.requests, args.tunnel_requests, args.idle = 1, 100, 5, 50
        args.duration = 0
    if args.load == "wrk" and WRK is None:
        sys.exit("wrk not found: apt-get install -y wrk")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.access(nginx, os.X_OK):
        sys.exit(f"nginx not found: {HINT_DEBIAN}")
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp, Children() as children:
        folder = Path(tmp)
        folder.chmod(0o755)  # nginx's workers run as an unprivileged user
        (folder / "www").mkdir()
        (folder / "tmp").mkdir()
        (folder / "www" / "100k.html").write_bytes(b"<p>" + b"x" * (PAGE - 7) + b"</p>")
        (folder / "www" / "1m.bin").write_bytes(os.urandom(BIG))
        (folder / "www" / "1k.html").write_bytes(b"y" * 1024)
        args.wrk_script = folder / "wrk.lua"
        args.wrk_script.write_text(WRK_SCRIPT)
        nginx_port = free_port()
        (folder / "nginx.conf").write_text(nginx_conf(folder, nginx_port))
        nginx_process = children.start(
            [
                nginx,
                "-p",
                str(folder),
                "-c",
                str(folder / "nginx.conf"),
                "-e",
                str(folder / "nginx-error.log"),
            ]
        )
        wait_for_port(nginx_port, process=nginx_process)
        targets, skipped = start_targets(children, folder, nginx_port, args)
        if args.only:
            targets = [t for t in targets if t.name in args.only]
        direct = Target(
            "nginx (direct)", nginx_port, nginx_process.pid, proxy=False, tunnels=bool(CURL)
        )
        load = Load()
        try:
            results = run_rounds(load, [direct, *targets], nginx_port, args)
            idle = {} if args.no_idle else measure_idle(load, targets, nginx_port, args.idle)
            if args.profile:
                for target in targets:
                    if target.name in ("gateway", "gateway-base"):
                        profile(load, target, nginx_port, args, folder)
        finally:
            load.close()
        report(results, idle, skipped, args)


def run_rounds(
    load: Load, targets: list[Target], nginx_port: int, args: Any
) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {}
    for round_index in range(args.rounds):
        for target in rotated(targets, round_index):
            cells = results.setdefault(target.name, {})
            if target.http and not args.connect_only:
                for size in args.sizes:
                    for concurrency in (1, 64):
                        http_cell(load, target, nginx_port, args, cells, size, concurrency)
            if target.tunnels:
                connect_to = f"{target.host}:{nginx_port}"
                cpu_before = tree_cpu_seconds(target.pid)
                answer = (
                    curl_tunnel(target, nginx_port, args.tunnel_requests)
                    if CURL
                    else load.ask(
                        {
                            "kind": "tunnel",
                            "port": target.port,
                            "connect_to": connect_to,
                            "request": f"GET /1m.bin HTTP/1.1\r\nHost: {connect_to}\r\n\r\n",
                            "requests": args.tunnel_requests,
                        }
                    )
                )
                # MB/s of the median transfer, as the research note's table (whose squid and
                # asyncio figures the targets quote) reports it; the mean is printed too.
                cells.setdefault("connect_mbps", []).append(
                    BIG / 1e6 / (percentile(answer["latencies"], 50) / 1000)
                )
                cells.setdefault("connect_mbps_mean", []).append(
                    len(answer["latencies"]) * BIG / answer["seconds"] / 1e6
                )
                for q in (50, 99):
                    cells.setdefault(f"tunnel_p{q}", []).append(percentile(answer["latencies"], q))
                moved = (len(answer["latencies"]) + 3) * BIG / 1e6
                cpu = tree_cpu_seconds(target.pid) - cpu_before
                cells.setdefault("cpu_connect", []).append(1000 * cpu / moved)
            print(f"round {round_index + 1}: {target.name} done", file=sys.stderr, flush=True)
    return results


def http_cell(
    load: Load,
    target: Target,
    nginx_port: int,
    args: Any,
    cells: dict[str, list[float]],
    size: str,
    concurrency: int,
) -> None:
    """One absolute-form cell: the `size` page at `concurrency`, with the target's CPU. The
    100 KB cells keep their old keys (`rps_c64`), the others carry their size (`rps_1k_c64`)."""
    cpu_before = tree_cpu_seconds(target.pid)
    warmup = max(concurrency, 20)
    command: dict[str, Any] = {
        "kind": "http",
        "port": target.port,
        "request": request_for(target, nginx_port, PAGES[size][0]),
        "concurrency": concurrency,
        "requests": args.requests,
        "warmup": warmup,
    }
    if args.duration:
        command["duration"] = args.duration
    answer = (
        wrk_load(target, nginx_port, args, size, concurrency)
        if args.load == "wrk"
        else load.ask(command)
    )
    cpu = tree_cpu_seconds(target.pid) - cpu_before
    key = "" if size == "100k" else f"{size}_"
    cells.setdefault(f"cpu_{key}c{concurrency}", []).append(1000 * cpu / answer["sent"])
    completed = answer.get("completed", len(answer.get("latencies", ())))
    cells.setdefault(f"rps_{key}c{concurrency}", []).append(completed / answer["seconds"])
    for q in (50, 99):
        value = answer[f"p{q}"] if f"p{q}" in answer else percentile(answer["latencies"], q)
        cells.setdefault(f"p{q}_{key}c{concurrency}", []).append(value)
    cells.setdefault(f"fail_{key}c{concurrency}", []).append(answer["failures"])


def wrk_load(
    target: Target, nginx_port: int, args: Any, size: str, concurrency: int
) -> dict[str, Any]:
    """One cell under wrk (`-t1` at c=1, `-t2` above, as in the research note): a one-second
    warmup run, then the timed run; the answer has the shape of the asyncio load's."""
    assert WRK is not None
    script = args.wrk_script
    path = PAGES[size][0]
    env = dict(os.environ, WRK_TARGET_URL=path, WRK_TARGET_HOST="127.0.0.1")
    if target.proxy:
        authority = f"{target.host}:{nginx_port}"
        env.update(WRK_TARGET_URL=f"http://{authority}{path}", WRK_TARGET_HOST=authority)
    threads = "1" if concurrency == 1 else "2"

    def run(seconds: float) -> dict[str, Any]:
        done = subprocess.run(
            [
                WRK,
                "-t",
                threads,
                "-c",
                str(concurrency),
                "-d",
                f"{seconds:g}s",
                "-s",
                str(script),
                f"http://127.0.0.1:{target.port}/",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=seconds + 30,
            check=True,
        )
        line = [x for x in done.stdout.splitlines() if x.startswith("{")][-1]
        summary: dict[str, Any] = json.loads(line)
        return summary

    warm = run(1)
    timed = run(args.duration or (1 if args.quick else 5))  # wrk counts whole seconds
    seconds = timed["duration_us"] / 1e6
    return {
        "completed": timed["requests"],
        "p50": timed["p50"],  # wrk keeps percentiles, not each request's latency
        "p99": timed["p99"],
        "failures": timed["non2xx"] + timed["errors"],
        "seconds": seconds,
        "sent": warm["requests"] + timed["requests"],
    }


def measure_idle(
    load: Load, targets: list[Target], nginx_port: int, count: int
) -> dict[str, tuple[float, int]]:
    out: dict[str, tuple[float, int]] = {}
    for target in targets:
        if not target.http:
            continue
        time.sleep(0.5)
        before = tree_pss_kb(target.pid)
        held = load.ask(
            {
                "kind": "idle",
                "port": target.port,
                "request": request_for(target, nginx_port, "/1k.html"),
                "connections": count,
            }
        )["held"]
        time.sleep(1.0)
        after = tree_pss_kb(target.pid)
        load.release()
        out[target.name] = ((after - before) / max(held, 1), held)
    return out


def profile(load: Load, target: Target, nginx_port: int, args: Any, folder: Path) -> None:
    """Sample a gateway with py-spy (`--gil`: where the interpreter's time goes) under c=64
    absolute-form load, then under CONNECT load; print gateway functions by inclusive share
    and all functions by own share."""
    spy_binary = py_spy_binary(folder)
    for kind in ("http", "tunnel"):
        out = folder / f"profile-{target.name}-{kind}.txt"
        spy = subprocess.Popen(
            [spy_binary, "record", "--pid", str(target.pid), "--rate", "250", "--gil",
             "--format", "raw", "--output", str(out), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(1.5)
        if kind == "http":
            load.ask(
                {
                    "kind": "http",
                    "port": target.port,
                    "request": request_for(target, nginx_port, PAGES[args.profile_size][0]),
                    "concurrency": 64,
                    "requests": args.requests * 2,
                    "warmup": 64,
                }
            )
        else:
            connect_to = f"{target.host}:{nginx_port}"
            load.ask(
                {
                    "kind": "tunnel",
                    "port": target.port,
                    "connect_to": connect_to,
                    "request": f"GET /1m.bin HTTP/1.1\r\nHost: {connect_to}\r\n\r\n",
                    "requests": args.tunnel_requests * 3,
                }
            )
        spy.send_signal(2)
        _, err = spy.communicate(timeout=60)
        if not out.exists():
            print(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
            continue
        if args.profile_out:
            Path(args.profile_out).mkdir(parents=True, exist_ok=True)
            shutil.copy(out, Path(args.profile_out) / out.name)
        inclusive, own, total = profile_counts(out)
        print(f"\nprofile of {target.name}, {kind} load: {total} samples (GIL held)")
        print("  inclusive (gateway code):")
        for name, count in [(n, c) for n, c in inclusive.most_common() if "gateway/" in n][:25]:
            print(f"    {100 * count / max(total, 1):5.1f}%  {name}")
        print("  self (any code):")
        for name, count in own.most_common(25):
            print(f"    {100 * count / max(total, 1):5.1f}%  {name}")


def report(
    results: dict[str, dict[str, list[float]]],
    idle: dict[str, tuple[float, int]],
    skipped: list[str],
    args: Any,
) -> None:
    per_cell = f"{args.duration:g} s" if args.duration else f"{args.requests} requests"
    print(
        f"\nforward proxy, 100 KB page, medians of {args.rounds} interleaved rounds, {per_cell} per cell"
    )
    print(
        f"{'target':<16} {'c=1 req/s':>10} {'p50 ms':>7} {'c=64 req/s':>11} {'p99 ms':>7}"
        f" {'CPU ms/req':>10} {'fail':>5} {'CONNECT MB/s*':>13} {'CPU ms/MB':>10}"
        f" {'KB/idle conn':>13}"
    )
    for name, cells in results.items():

        def cell(key: str, fmt: str = "{:.0f}", cells: dict[str, list[float]] = cells) -> str:
            return fmt.format(median(cells[key])) if key in cells else "-"

        fails = int(sum(cells.get("fail_c1", [])) + sum(cells.get("fail_c64", [])))
        kb = f"{idle[name][0]:.1f}" if name in idle else "-"
        print(
            f"{name:<16} {cell('rps_c1'):>10} {cell('p50_c1', '{:.2f}'):>7} {cell('rps_c64'):>11} "
            f"{cell('p99_c64', '{:.1f}'):>7} {cell('cpu_c64', '{:.3f}'):>10} {fails:>5} "
            f"{cell('connect_mbps'):>13} {cell('cpu_connect', '{:.3f}'):>10} {kb:>13}"
        )
    print(
        "CPU: the target's process tree (user + system) per request at c=64, and per MB through"
        " a tunnel; it moves less than req/s when other work shares the machine\n"
        "*: 1 MB over the median transfer's time (curl -p -x, one tunnel, sequential GETs;"
        " for nginx (direct), curl without a proxy)"
    )
    for name, cells in results.items():
        if "tunnel_p50" in cells:
            print(
                f"  {name}: one 1 MB GET through the tunnel takes p50"
                f" {median(cells['tunnel_p50']):.2f} ms, p99 {median(cells['tunnel_p99']):.2f} ms;"
                f" {median(cells['connect_mbps_mean']):.0f} MB/s over all transfers"
            )
    for size in args.sizes:
        if size != "100k":
            small_table(results, size, args.rounds, per_cell)
    for name, (_kb, held) in idle.items():
        if held < args.idle:
            print(f"note: {name} kept only {held} of {args.idle} idle connections open")
    for line in skipped:
        print(f"skipped: {line}")
    gateway = results.get("gateway", {})
    checks = []

    def verdict(label: str, ok: bool) -> None:
        checks.append(f"{'met' if ok else 'MISSED'}: {label}")

    def med(name: str, key: str) -> float:
        return (
            median(results.get(name, {}).get(key, []))
            if key in results.get(name, {})
            else float("nan")
        )

    if "rps_c64" in gateway:
        g64 = med("gateway", "rps_c64")
        for peer in ("squid", "tinyproxy"):
            if peer in results:
                verdict(
                    f"100 KB c=64 ahead of {peer} ({g64:.0f} vs {med(peer, 'rps_c64'):.0f} req/s)",
                    g64 > med(peer, "rps_c64"),
                )
        if "aiohttp-relay" in results:
            ref = med("aiohttp-relay", "rps_c64")
            verdict(
                f"100 KB c=64 >= 0.9x the bare aiohttp relay ({g64 / ref:.2f}x)", g64 >= 0.9 * ref
            )
            by_cpu = med("aiohttp-relay", "cpu_c64") / med("gateway", "cpu_c64")
            print(f"by CPU per request, the gateway does {by_cpu:.2f}x the bare relay's req/s")
    small_verdicts(results, args.sizes, verdict, med)
    if "connect_mbps" in gateway and "connect_mbps" in results.get("squid", {}):
        ratio = med("gateway", "connect_mbps") / med("squid", "connect_mbps")
        verdict(f"CONNECT >= 1.5x squid's MB/s ({ratio:.2f}x)", ratio >= 1.5)
    if gateway:
        if "gateway" in idle:
            verdict(
                f"under 12 KB per idle connection ({idle['gateway'][0]:.1f} KB)",
                idle["gateway"][0] < 12,
            )
        workers = next((n for n in results if n.startswith("gateway-w")), None)
        if workers is not None and "rps_c64" in results.get("proxy.py", {}):
            w64 = med(workers, "rps_c64")
            verdict(
                f"{workers} 100 KB c=64 ahead of proxy.py ({w64:.0f} vs {med('proxy.py', 'rps_c64'):.0f}"
                " req/s)",
                w64 > med("proxy.py", "rps_c64"),
            )
    if "gateway-base" in results:
        for key, label in (
            ("rps_c1", "100 KB c=1 req/s"),
            ("rps_c64", "100 KB c=64 req/s"),
            ("connect_mbps", "CONNECT MB/s"),
            ("cpu_c64", "100 KB CPU ms/req"),
            ("cpu_connect", "CPU ms/MB"),
            ("rps_1k_c1", "1 KB c=1 req/s"),
            ("rps_1k_c64", "1 KB c=64 req/s"),
            ("cpu_1k_c64", "1 KB CPU ms/req"),
        ):
            if key not in results["gateway-base"]:
                continue
            ratio = med("gateway", key) / med("gateway-base", key)
            print(f"gateway / gateway-base, {label}: {ratio:.2f}x")
    print("\n".join(checks))


def small_table(
    results: dict[str, dict[str, list[float]]], size: str, rounds: int, per_cell: str
) -> None:
    """The absolute-form cells of a page other than the 100 KB one (no CONNECT, no idle)."""
    print(
        f"\nforward proxy, {PAGES[size][1]} page, medians of {rounds} interleaved rounds,"
        f" {per_cell} per cell"
    )
    print(
        f"{'target':<16} {'c=1 req/s':>10} {'p50 ms':>7} {'c=64 req/s':>11} {'p99 ms':>7}"
        f" {'CPU ms/req':>10} {'fail':>5}"
    )
    for name, cells in results.items():
        if f"rps_{size}_c64" not in cells:
            continue

        def cell(key: str, fmt: str = "{:.0f}", cells: dict[str, list[float]] = cells) -> str:
            key = key.replace("_c", f"_{size}_c")
            return fmt.format(median(cells[key])) if key in cells else "-"

        fails = int(sum(cells.get(f"fail_{size}_c1", [])) + sum(cells.get(f"fail_{size}_c64", [])))
        print(
            f"{name:<16} {cell('rps_c1'):>10} {cell('p50_c1', '{:.2f}'):>7} {cell('rps_c64'):>11} "
            f"{cell('p99_c64', '{:.1f}'):>7} {cell('cpu_c64', '{:.3f}'):>10} {fails:>5}"
        )


def small_verdicts(
    results: dict[str, dict[str, list[float]]],
    sizes: list[str],
    verdict: Any,
    med: Any,
) -> None:
    """The small-request targets: with `listen.workers: 2`, 1 KB at c=64 at or above squid
    and proxy.py; one process at or above tinyproxy at every size and concurrency."""
    workers = next((n for n in results if n.startswith("gateway-w")), None)
    if "1k" in sizes and workers is not None:
        w64 = med(workers, "rps_1k_c64")
        for peer in ("squid", "proxy.py"):
            if "rps_1k_c64" in results.get(peer, {}):
                ref = med(peer, "rps_1k_c64")
                verdict(
                    f"{workers} 1 KB c=64 >= {peer} ({w64:.0f} vs {ref:.0f} req/s,"
                    f" {w64 / ref:.2f}x)",
                    w64 >= ref,
                )
    if "gateway" in results and "tinyproxy" in results:
        for size in sizes:
            key = "" if size == "100k" else f"{size}_"
            for concurrency in (1, 64):
                name = f"rps_{key}c{concurrency}"
                if name in results["gateway"] and name in results["tinyproxy"]:
                    mine, ref = med("gateway", name), med("tinyproxy", name)
                    verdict(
                        f"one process {PAGES[size][1]} c={concurrency} >= tinyproxy"
                        f" ({mine:.0f} vs {ref:.0f} req/s, {mine / ref:.2f}x)",
                        mine >= ref,
                    )


if __name__ == "__main__":
    main()
