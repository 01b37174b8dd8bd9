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

Two in-process measurements of the retrieval pipeline, each against its yardstick in the same
run:
- `passages`: ranking the passages of a Research call (search/passages.py over five cached
  pages of about 100 KB) against extracting those pages (what the WebFetch path does to each
  body: extraction to Markdown and sanitising), the query being the first page's title.
  The pages are the five real article pages of the scrapinghub extraction benchmark closest
  to 100 KB (`../shared/extbench/scrapinghub` from the repository root, or `--data` /
  `$EXTBENCH_DIR`), or, without that data, five generated 100 KB articles whose text is
  nearly all of the page (harder for ranking: more text per byte). Target: ranking < 1/4 of
  extracting.
- `fusion`: a 5-phrasing `search_many` against one `search`, both through the gateway's own
  provider transport (the pinned Fetcher) to a loopback fake provider that answers every
  request after 100 ms, cache off. Target: 5 phrasings <= 1.5x one.

    .venv/bin/python bench/search.py passages [--rounds 9] [--data DIR]
    .venv/bin/python bench/search.py fusion [--rounds 5] [--requests 10]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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

from common import REPO, Children, free_port, free_ports, median, percentile, rotated, wait_for_port

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


PASSAGES_TARGET = 0.25
FUSION_TARGET = 1.5
PROVIDER_DELAY = 0.1
_WORDS = [
    "gateway",
    "policy",
    "agent",
    "request",
    "response",
    "header",
    "timeout",
    "deadline",
    "retry",
    "provider",
    "search",
    "result",
    "page",
    "passage",
    "heading",
    "paragraph",
    "extract",
    "markdown",
    "audit",
    "record",
    "signature",
    "envelope",
    "nonce",
    "marker",
    "domain",
    "address",
    "resolver",
    "proxy",
    "tunnel",
    "certificate",
    "cache",
    "health",
    "cooling",
    "rate",
    "limit",
    "budget",
    "query",
    "phrasing",
    "fusion",
    "rank",
    "score",
    "weight",
    "mirror",
    "duplicate",
    "canonical",
    "url",
]


def article(seed: int, target_bytes: int = 100_000) -> bytes:
    """A realistic article page of about `target_bytes`: navigation, sections with headings
    and paragraphs of varied sentences, a footer."""
    import random

    rng = random.Random(seed)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Article {seed}</title></head><body><nav>"
        + "".join(f"<a href='/n{i}'>Menu {i}</a>" for i in range(30))
        + "</nav><article>",
        f"<h1>Article {seed} on egress gateways</h1>",
    ]
    size = sum(map(len, parts))
    section = 0
    while size < target_bytes:
        section += 1
        block = [f"<h2>Section {section}: {' '.join(rng.sample(_WORDS, 3))}</h2>"]
        for _ in range(rng.randint(3, 6)):
            sentences = [
                " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 20))).capitalize() + "."
                for _ in range(rng.randint(3, 7))
            ]
            block.append(f"<p>{' '.join(sentences)} <a href='/r{section}'>more</a></p>")
        text = "".join(block)
        parts.append(text)
        size += len(text)
    parts.append("</article><footer>footer links</footer></body></html>")
    return "".join(parts).encode()


def real_pages(data: Path, count: int = 5, size: int = 100_000) -> list[bytes]:
    """The `count` pages of the corpus closest to `size` bytes, in a stable order."""
    import gzip

    found = []
    for path in sorted((data / "html").glob("*.html.gz")):
        body = gzip.decompress(path.read_bytes())
        found.append((abs(len(body) - size), path.name, body))
    return [body for _, _, body in sorted(found)[:count]]


def bench_passages(rounds: int, data: Path) -> None:
    sys.path.insert(0, str(REPO))
    from gateway.search.passages import rank_passages
    from gateway.tools.webfetch import prepare

    html = "text/html; charset=utf-8"
    if (data / "html").is_dir():
        pages, source = real_pages(data), f"the scrapinghub benchmark's pages ({data.name})"
    else:
        pages, source = [article(seed) for seed in range(5)], "generated articles"
    prepared = [prepare(page, html, "markdown") for page in pages]
    texts = [p.clean.text for p in prepared]
    synthetic = "provider retry deadline timeout"
    query = (prepared[0].title or synthetic) if source != "generated articles" else synthetic
    ratios, extracting, ranking = [], [], []
    for _ in range(rounds):
        gc.collect()  # neither step pays for the other's garbage
        started = time.perf_counter()
        for page in pages:
            prepare(page, html, "markdown")
        extract_ms = (time.perf_counter() - started) * 1000
        gc.collect()
        started = time.perf_counter()
        best = rank_passages(query, texts, 8)
        rank_ms = (time.perf_counter() - started) * 1000
        assert best, query
        extracting.append(extract_ms)
        ranking.append(rank_ms)
        ratios.append(rank_ms / extract_ms)
    kb = sum(map(len, pages)) / 1024 / len(pages)
    print(f"\n{rounds} rounds; {source}: 5 pages of {kb:.0f} KB on average, Markdown text of "
          f"{sum(map(len, texts)) // len(texts)} characters per page; query {query[:60]!r}\n")  # fmt: skip
    print("| step | median (ms) |")
    print("| --- | ---: |")
    print(f"| extracting the 5 pages | {median(extracting):.2f} |")
    print(f"| ranking their passages | {median(ranking):.2f} |")
    ratio = median(ratios)
    verdict = "PASS" if ratio < PASSAGES_TARGET else "FAIL"
    print(f"\npassage ranking / page extraction: {ratio:.3f} median "
          f"(target < {PASSAGES_TARGET}): {verdict}")  # fmt: skip


async def bench_fusion(rounds: int, requests: int) -> None:
    sys.path.insert(0, str(REPO))
    from aiohttp import web

    from gateway.fetch.client import Fetcher
    from gateway.fetch.provider import FetcherProviderTransport, ProviderEndpoint
    from gateway.fetch.resolver import parse_static_hosts
    from gateway.search.assembly import build_engine
    from gateway.search.query import SearchQuery

    body = brave_body()

    async def search(request: web.Request) -> web.Response:
        await asyncio.sleep(PROVIDER_DELAY)
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/res/v1/web/search", search)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    base_url = f"http://{PROVIDER_HOST}:{port}"
    fetcher = Fetcher(static_hosts=parse_static_hosts({PROVIDER_HOST: ["127.0.0.1"]}))
    transport = FetcherProviderTransport(fetcher, [ProviderEndpoint(base_url, True)])
    entry = {"id": "brave", "kind": "brave", "base_url": base_url, "api_key_env": KEY_ENV,
             "allow_private": True}  # fmt: skip
    engine = build_engine(
        {"providers": [entry], "cache_ttl": 0}, transport, time.time, environ={KEY_ENV: KEY}
    )
    kinds = ("one query", "five queries")
    per_round: dict[str, list[float]] = {kind: [] for kind in kinds}
    try:
        for round_index in range(rounds + 1):  # the first round warms up, uncounted
            times: dict[str, list[float]] = {kind: [] for kind in kinds}
            for index in range(requests):
                for kind in rotated(kinds, round_index * requests + index):
                    count = 1 if kind == "one query" else 5
                    tag = uuid.uuid4().hex[:8]
                    queries = [SearchQuery(f"bench {tag} phrasing {n}") for n in range(count)]
                    started = time.perf_counter()
                    outcome = await engine.search_many(queries)
                    times[kind].append((time.perf_counter() - started) * 1000)
                    assert outcome.results and not outcome.cached, outcome.warnings
            if round_index:
                for kind in kinds:
                    per_round[kind].append(median(times[kind]))
    finally:
        await fetcher.close()
        await runner.cleanup()
    one, five = (median(per_round[kind]) for kind in kinds)
    print(f"\n{rounds} rounds x {requests} searches per kind, interleaved; the fake provider "
          f"answers after {PROVIDER_DELAY * 1000:.0f} ms\n")  # fmt: skip
    print("| search | median of round medians (ms) |")
    print("| --- | ---: |")
    print(f"| one query | {one:.1f} |")
    print(f"| five queries, fused | {five:.1f} |")
    ratio = five / one
    verdict = "PASS" if ratio <= FUSION_TARGET else "FAIL"
    print(f"\nfive fused / one: {ratio:.3f} (target <= {FUSION_TARGET}): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    provider = sub.add_parser("provider", help="run the fake Brave provider (used internally)")
    provider.add_argument("--port", type=int, required=True)
    passages = sub.add_parser("passages", help="passage ranking against page extraction")
    passages.add_argument("--rounds", type=int, default=9)
    passages.add_argument(
        "--data",
        type=Path,
        default=Path(
            os.environ.get("EXTBENCH_DIR") or REPO.parent / "shared" / "extbench" / "scrapinghub"
        ),
    )
    fusion = sub.add_parser("fusion", help="five fused phrasings against one query")
    fusion.add_argument("--rounds", type=int, default=5)
    fusion.add_argument("--requests", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    if args.command == "provider":
        serve_provider(args.port)
        return
    if args.command == "passages":
        bench_passages(args.rounds, args.data)
        return
    if args.command == "fusion":
        asyncio.run(bench_fusion(args.rounds, args.requests))
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-search-"))
    python = str(REPO / ".venv" / "bin" / "python")
    if not Path(python).exists():
        python = sys.executable
    try:
        with Children() as children:
            provider_port, gateway_port = free_ports(2)
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
