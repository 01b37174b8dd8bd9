"""Search latency through the API: a cached `POST /v1/search`, and what an uncached one adds
over the provider's own latency, measured side by side in one run.

Every server runs in its own process on loopback, from a temporary folder removed at exit
(with every process this script started):
- a fake Brave provider (`bench/search.py provider`): aiohttp, answers every
  `/res/v1/web/search` with the same realistic 10-result JSON body, no added delay;
- `gateway serve --config …`: the provider configured as `kind: brave` with an API key from
  the environment, `allow_private: true`, its name mapped to 127.0.0.1 by `resolver.hosts`,
  a client policy that allows most results and denies some, audit on (a temporary file).

One client (aiohttp, keep-alive, one request at a time) measures three kinds of request,
interleaved request by request in an order rotated each time:
- `provider`: the request the gateway would send, straight to the fake provider;
- `uncached`: `POST /v1/search` with a query never asked before (a cache miss);
- `cached`: `POST /v1/search` with one query asked before (a cache hit).
Per round: the median of each kind, and the overhead = median(uncached) - median(provider).
The table shows the medians over rounds; targets: cached < 2 ms, overhead < 5 ms.

    .venv/bin/python bench/search.py [--rounds 5] [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from urllib.parse import urlencode

from common import REPO, Children, free_port, median, percentile, rotated, wait_for_port

PROVIDER_HOST = "brave.bench.example"  # mapped to 127.0.0.1 by the gateway's resolver.hosts
KEY_ENV = "BENCH_BRAVE_KEY"
KEY = "bench-brave-key-0123456789abcdef"
CACHED_TARGET_MS = 2.0
OVERHEAD_TARGET_MS = 5.0
KINDS = ("provider", "uncached", "cached")


def brave_body() -> bytes:
    """Ten results as Brave sends them; two of them the bench policy denies."""
    results = []
    for n in range(10):
        host = "blocked.example.net" if n in (3, 7) else f"site{n % 6}.example.com"
        results.append(
            {
                "type": "search_result",
                "subtype": "generic",
                "title": f"Result {n}: egress gateways for <strong>agents</strong>, part {n}",
                "url": f"https://{host}/articles/{n}?utm_source=search&id={n}",
                "description": (
                    "An egress gateway decides every request an agent makes, records it, "
                    f"and marks what comes back as untrusted. Section {n} of the series. " * 2
                ),
                "page_age": "2026-03-01T09:00:00",
                "language": "en",
                "meta_url": {"scheme": "https", "netloc": host, "hostname": host, "path": "›"},
            }
        )
    body = {
        "type": "search",
        "query": {"original": "q"},
        "web": {"type": "search", "results": results},
    }
    return json.dumps(body).encode()


def serve_provider(port: int) -> None:
    from aiohttp import web

    body = brave_body()

    async def search(request: web.Request) -> web.Response:
        if request.headers.get("X-Subscription-Token") != KEY:
            return web.json_response({"type": "ErrorResponse"}, status=401)
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/res/v1/web/search", search)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def gateway_files(folder: Path, gateway_port: int, provider_port: int) -> Path:
    (folder / "bench-policy.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: bench-search
            default: deny
            domains:
              allow: [".example.com"]
              deny: ["blocked.example.net"]
            """
        )
    )
    config = folder / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            listen: {{host: 127.0.0.1, port: {gateway_port}}}
            instance_id: bench
            policy: bench-policy.yaml
            audit: {{path: "audit/gateway-{{instance}}.jsonl"}}
            search:
              providers:
                - id: brave
                  kind: brave
                  base_url: "http://{PROVIDER_HOST}:{provider_port}"
                  api_key_env: {KEY_ENV}
                  allow_private: true
              cache_ttl: 600
            resolver:
              hosts:
                {PROVIDER_HOST}: ["127.0.0.1"]
            """
        )
    )
    return config


async def measure(gateway_port: int, provider_port: int, rounds: int, requests: int) -> None:
    import aiohttp

    search_url = f"http://127.0.0.1:{gateway_port}/v1/search"
    provider_base = f"http://127.0.0.1:{provider_port}/res/v1/web/search"
    connector = aiohttp.TCPConnector(limit=4)
    timeout = aiohttp.ClientTimeout(total=30)
    per_round: dict[str, list[float]] = {kind: [] for kind in KINDS}
    overheads: list[float] = []
    everything: dict[str, list[float]] = {kind: [] for kind in KINDS}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def provider(query: str) -> None:
            params = {"q": query, "count": "10", "text_decorations": "false"}
            headers = {"Accept": "application/json", "X-Subscription-Token": KEY}
            async with session.get(f"{provider_base}?{urlencode(params)}", headers=headers) as r:
                await r.read()
                assert r.status == 200, r.status

        async def gateway(query: str, *, cached: bool) -> None:
            async with session.post(search_url, json={"query": query}) as response:
                body = await response.json()
                assert response.status == 200, body
                assert body["cached"] is cached, body["cached"]
                assert len(body["results"]) == 8 and body["filtered"]["policy"] == 2

        await gateway("cached query", cached=False)  # the one miss that fills the cache
        for _ in range(50):  # warm-up: connections, code paths
            await gateway("cached query", cached=True)
            await provider("warm up")
            await gateway(f"warm {uuid.uuid4().hex}", cached=False)
        for round_index in range(rounds):
            times: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for index in range(requests):
                for kind in rotated(KINDS, round_index * requests + index):
                    query = f"bench {round_index} {index} {uuid.uuid4().hex[:8]}"
                    started = time.perf_counter()
                    if kind == "provider":
                        await provider(query)
                    elif kind == "uncached":
                        await gateway(query, cached=False)
                    else:
                        await gateway("cached query", cached=True)
                    times[kind].append((time.perf_counter() - started) * 1000)
            for kind in KINDS:
                per_round[kind].append(median(times[kind]))
                everything[kind].extend(times[kind])
            overheads.append(median(times["uncached"]) - median(times["provider"]))
            print(
                f"round {round_index + 1}: "
                + ", ".join(f"{kind} {median(times[kind]):.3f} ms" for kind in KINDS)
                + f", overhead {overheads[-1]:.3f} ms",
                file=sys.stderr,
            )
    report(per_round, overheads, everything, rounds, requests)


def report(
    per_round: dict[str, list[float]],
    overheads: list[float],
    everything: dict[str, list[float]],
    rounds: int,
    requests: int,
) -> None:
    print(f"\n{rounds} rounds x {requests} requests per kind, interleaved; one at a time\n")
    print("| request | median of round medians (ms) | p90 (ms) | p99 (ms) |")
    print("| --- | ---: | ---: | ---: |")
    for kind in KINDS:
        values = everything[kind]
        print(
            f"| {kind} | {median(per_round[kind]):.3f} | {percentile(values, 90):.3f} "
            f"| {percentile(values, 99):.3f} |"
        )
    cached = median(per_round["cached"])
    overhead = median(overheads)
    print()
    verdict = "PASS" if cached < CACHED_TARGET_MS else "FAIL"
    print(f"cached search: {cached:.3f} ms median (target < {CACHED_TARGET_MS} ms): {verdict}")
    verdict = "PASS" if overhead < OVERHEAD_TARGET_MS else "FAIL"
    print(
        f"uncached overhead over the provider: {overhead:.3f} ms median "
        f"(target < {OVERHEAD_TARGET_MS} ms): {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    provider = sub.add_parser("provider", help="run the fake Brave provider (used internally)")
    provider.add_argument("--port", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    if args.command == "provider":
        serve_provider(args.port)
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-search-"))
    python = str(REPO / ".venv" / "bin" / "python")
    if not Path(python).exists():
        python = sys.executable
    try:
        with Children() as children:
            provider_port, gateway_port = free_port(), free_port()
            provider_process = children.start(
                [python, str(Path(__file__).resolve()), "provider", "--port", str(provider_port)],
                log=folder / "provider.log",
            )
            wait_for_port(provider_port, process=provider_process)
            config = gateway_files(folder, gateway_port, provider_port)
            gateway_process = children.start(
                [python, "-m", "gateway", "serve", "--config", str(config)],
                log=folder / "gateway.log",
                cwd=folder,
                env={**os.environ, KEY_ENV: KEY},
            )
            wait_for_port(gateway_port, process=gateway_process)
            asyncio.run(measure(gateway_port, provider_port, args.rounds, args.requests))
            log = (folder / "gateway.log").read_text(errors="replace")
            if KEY in log:
                sys.exit("the provider key appeared in the gateway's log")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
