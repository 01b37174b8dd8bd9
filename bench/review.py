"""The review page on large logs: the newest page of a 1 GB log against the same view of a
10 MB log, a filtered view over 1,000,000 records against `grep -F` scanning the same files,
and the memory each view holds.

The logs are generated here, in a temporary folder removed at the end: chained records shaped
like the gateway's (each line's `chain.prev` is the SHA-256 of the line before), in files
rotated at 100 MB like the writer's. Each view is a real `GET /review/...` of a gateway on
loopback, page rendering included; the page cache is warmed first for both sides.

    .venv/bin/python bench/review.py [--rounds 5] [--small-mb 10] [--big-mb 1024]
                                     [--records 1000000] [--rare 60]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
from aiohttp import ClientSession, web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.audit.summary import summarise_files  # noqa: E402
from gateway.config import AuditConfig, GatewayConfig, ReviewConfig  # noqa: E402
from gateway.runtime import Services  # noqa: E402
from gateway.server.app import make_app  # noqa: E402

ROTATE_BYTES = 100 * 1024 * 1024
START = 1_800_000_000.0
RARE_CLIENT = "rare-agent"


def record(seq: int, prev: str | None, moment: float, client: str) -> dict[str, Any]:
    denied = seq % 7 == 0
    millis = int(moment * 1000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(millis // 1000)) + f".{millis % 1000:03d}Z"
    domain = f"site{seq % 997}.example.org"
    return {
        "@timestamp": stamp,
        "event": {"id": f"{seq:032x}", "action": "WebFetch", "outcome": "failure" if denied else "success", "type": ["denied" if denied else "allowed"], "duration_ms": seq % 300},
        "client": {"id": client},
        "policy": {"name": "research", "sha256": "5" * 64, "decision": "deny" if denied else "allow", "enforced": True, "rule": "default" if denied else "domains.allow[0]", "reason": "domain_not_allowed" if denied else None},
        "url": {"original": f"https://{domain}/docs/page/{seq}?lang=en", "full": f"https://{domain}/docs/page/{seq}?lang=en"},
        "destination": {"domain": domain, "ip": "198.51.100.7", "port": 443},
        "http": {"request": {"method": "GET"}, "response": {"status_code": 403 if denied else 200, "bytes": 5000 + seq % 90000}},
        "hash": {"sha256": "a" * 64},
        "observer": {"name": "bench", "version": "bench"},
        "chain": {"seq": seq, "prev": prev},
    }


def generate(folder: Path, *, total_bytes: int | None = None, records: int | None = None, rare: int = 0) -> tuple[int, int, list[Path]]:
    """One chain (instance `bench`) of rotated files; returns (records, bytes, files)."""
    folder.mkdir(parents=True)
    files: list[Path] = []
    seq, written, prev = 0, 0, None
    every = (records // rare) if records and rare else 0
    handle = None
    size = ROTATE_BYTES
    while (total_bytes is None or written < total_bytes) and (records is None or seq < records):
        if size >= ROTATE_BYTES:
            if handle is not None:
                handle.close()
            path = folder / f"gateway-bench.{len(files) + 1:012d}.jsonl"
            files.append(path)
            handle = open(path, "wb")  # noqa: SIM115 -- closed on rotation and at the end
            size = 0
        seq += 1
        client = RARE_CLIENT if every and seq % every == every // 2 else f"agent-{seq % 5}"
        line = orjson.dumps(record(seq, prev, START + seq * 0.05, client))
        prev = hashlib.sha256(line).hexdigest()
        handle.write(line + b"\n")
        size += len(line) + 1
        written += len(line) + 1
    assert handle is not None
    handle.close()
    live = folder / "gateway-bench.jsonl"  # the newest file carries the live name
    files[-1].rename(live)
    files[-1] = live
    return seq, written, files


class Gateway:
    """A gateway on loopback whose review page reads `folder`."""

    def __init__(self, folder: Path) -> None:
        config = GatewayConfig(
            instance_id="bench-reader",
            audit=AuditConfig(path=str(folder / "gateway-{instance}.jsonl")),
            review=ReviewConfig(enabled=True),
        )
        self.services = Services(config)
        self.runner: web.AppRunner | None = None
        self.base = ""

    async def start(self) -> None:
        self.services.open()
        self.runner = web.AppRunner(make_app(self.services))
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        await self.services.close()


async def timed_get(session: ClientSession, url: str) -> tuple[float, int]:
    began = time.perf_counter()
    async with session.get(url) as response:
        body = await response.read()
        assert response.status == 200, (url, response.status, body[:300])
    return time.perf_counter() - began, len(body)


def timed_grep(files: list[Path]) -> float:
    began = time.perf_counter()
    done = subprocess.run(["grep", "-F", "-c", f'"{RARE_CLIENT}"', *map(str, files)], capture_output=True, check=False)
    elapsed = time.perf_counter() - began
    assert done.returncode == 0, done.stderr
    return elapsed


async def peak_memory(session: ClientSession, url: str) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    await timed_get(session, url)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def warm(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb") as handle:
            while handle.read(8 << 20):
                pass


async def run(args: argparse.Namespace, root: Path) -> None:
    began = time.perf_counter()
    small = generate(root / "small", total_bytes=args.small_mb * 1024 * 1024)
    big = generate(root / "big", total_bytes=args.big_mb * 1024 * 1024)
    million = generate(root / "million", records=args.records, rare=args.rare)
    print(f"generated in {time.perf_counter() - began:.1f} s: small {small[1] / 1e6:.1f} MB ({small[0]} records, {len(small[2])} file(s)), big {big[1] / 1e6:.1f} MB ({big[0]} records, {len(big[2])} files), filtered set {million[1] / 1e6:.1f} MB ({million[0]} records, {args.rare} of {RARE_CLIENT}, {len(million[2])} files)")
    for _, _, files in (small, big, million):
        warm(files)
    gateways = {name: Gateway(root / name) for name in ("small", "big", "million")}
    for gateway in gateways.values():
        await gateway.start()
    newest = "/review/?limit=100"
    filtered = f"/review/?client={RARE_CLIENT}&limit=100"
    times: dict[str, list[float]] = {"small": [], "big": [], "filtered": [], "grep": []}
    try:
        async with ClientSession() as session:
            for gateway in gateways.values():  # one untimed view each (templates, caches)
                await timed_get(session, gateway.base + newest)
            _, shown = await timed_get(session, gateways["million"].base + filtered)
            for round_index in range(args.rounds):
                order = ["small", "big", "filtered", "grep"]
                order = order[round_index % 4 :] + order[: round_index % 4]
                for name in order:
                    if name == "grep":
                        times[name].append(timed_grep(million[2]))
                    elif name == "filtered":
                        times[name].append((await timed_get(session, gateways["million"].base + filtered))[0])
                    else:
                        times[name].append((await timed_get(session, gateways[name].base + newest))[0])
            memory = {
                f"newest, {args.small_mb} MB": await peak_memory(session, gateways["small"].base + newest),
                f"newest, {args.big_mb} MB": await peak_memory(session, gateways["big"].base + newest),
                f"filtered, {million[0]} records": await peak_memory(session, gateways["million"].base + filtered),
            }
            # The summary reads every file once, then only what was written since.
            summary_first, _ = await timed_get(session, gateways["million"].base + "/review/summary")
            summary_again, _ = await timed_get(session, gateways["million"].base + "/review/summary")
            began = time.perf_counter()
            summarise_files([str(path) for path in million[2]])
            cli_summary = time.perf_counter() - began
    finally:
        for gateway in gateways.values():
            await gateway.close()
    median = {name: statistics.median(values) * 1000 for name, values in times.items()}
    page_ratio = median["big"] / median["small"]
    grep_ratio = median["filtered"] / median["grep"]
    print(f"| view | median ms ({args.rounds} rounds) |")
    print("| --- | ---: |")
    print(f"| newest 100, {args.small_mb} MB log | {median['small']:.1f} |")
    print(f"| newest 100, {args.big_mb} MB log | {median['big']:.1f} |")
    print(f"| client filter over {million[0]} records ({shown // 1024} KB page) | {median['filtered']:.1f} |")
    print(f"| grep -F -c over the same files | {median['grep']:.1f} |")
    print(f"newest page, {args.big_mb} MB / {args.small_mb} MB: {page_ratio:.2f}x (target <= 2: {'met' if page_ratio <= 2 else 'MISSED'})")
    print(f"filtered view / grep -F: {grep_ratio:.2f}x (target <= 3: {'met' if grep_ratio <= 3 else 'MISSED'})")
    for label, peak in memory.items():
        print(f"peak traced memory, {label}: {peak / 1024:.0f} KB")
    print(f"summary of {million[0]} records: first view {summary_first * 1000:.0f} ms, next view {summary_again * 1000:.1f} ms; `gateway audit summary` over the same files {cli_summary * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small-mb", type=int, default=10)
    parser.add_argument("--big-mb", type=int, default=1024)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rare", type=int, default=60)
    args = parser.parse_args()
    if shutil.which("grep") is None:
        sys.exit("bench/review.py needs grep")
    root = Path(tempfile.mkdtemp(prefix="gateway-review-bench-"))
    try:
        asyncio.run(run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
