"""Fetch API throughput: `POST /v1/fetch` of a 100 KB article page through a real `gateway
serve`, against yardstick relays measured in the same run.

Every server runs in its own process, on loopback ports, from a temporary folder that is
removed at exit (with every process this script started):
- nginx (Debian `nginx-light`, 1 worker, sendfile on, tcp_nopush off as in the research
  anchor) serves a generated, realistic ~100 KB article page;
- `gateway serve --config …`: a config whose `resolver.hosts` maps a public-looking name to
  127.0.0.1, a policy allowing that name, the nginx port and `networks.allow: [127.0.0.0/8]`,
  audit on (a temporary file); measured in `raw` mode and in `auto` (Markdown) mode, each
  asking for the whole page (`max_chars` = the policy's `limits.max_chars`);
- `bench/relays.py --kind text`: aiohttp handler that fetches the page over a keep-alive
  session and answers its SHA-256 and its text (no policy, extraction or audit), as the
  research note's `aiohttp-ref/fetch` did: the ~780 req/s yardstick the raw target names;
- `bench/relays.py --kind bare`: the same answering only the SHA-256, for context (it never
  sends the page back, which is most of what the others write);
- `bench/relays.py --kind trafilatura`: the same plus trafilatura's Markdown extraction;
- nginx itself, GET of the page (`direct`), for context only: that row is bounded by the
  Python load generator, which runs in its own process (bench/common.py).

Each round measures every target at each concurrency with a fixed number of requests,
in an order rotated per round; the table shows the median over rounds of req/s, p50, p99
and target CPU (its process tree; 100 = one core), and the targets are ratios taken within
each round, then the median: `raw` req/s >= 75% of the text relay's, Markdown (`auto`)
req/s >= 2x the trafilatura relay's. `--profile` then samples the gateway with py-spy under
load in each mode and prints where its time goes.

`--real-pages N` then measures the same cells (but `direct`) on N real pages of 100-350 KB
from the extraction data sets (`../shared/extbench`, half from WCXB dev and half from
scrapinghub, picked evenly from their sorted names, so the same N pages every run), each
served by the same nginx, and prints per page and as medians the ratios the goals name:
`auto` over `raw` at c=1, `auto` over the trafilatura relay, and `auto` at the highest
concurrency over `auto` at c=1.

    .venv/bin/python bench/fetch.py [--rounds 3] [--requests 1000] [--slow-requests 200]
                                    [--concurrency 1 32] [--profile] [--real-pages N]
                                    [--only raw markdown]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# bench/proxy.py takes frame_name, py_spy_binary and tree_cpu_seconds from here (for now).
from common import (
    Children,
    LoadGenerator,
    LoadResult,
    frame_name,  # noqa: F401
    free_ports,
    median,
    nginx_config,
    profile_counts,
    py_spy_binary,
    rotated,
    run_load,
    start_gateway,
    start_nginx,
    tree_cpu_seconds,
    wait_for_ports,
    write_gateway_config,
    write_page_policy,
)

HOST = "news.example.com"  # a public-looking name; the gateway's resolver maps it to loopback
PAGE_PATH = "/2026/03/egress-gateways-for-agents.html"
PAGE_BYTES = 100_000
MAX_CHARS = 400_000  # the policy's limits.max_chars: the whole page comes back, real ones too
REAL_PAGE_BYTES = (100_000, 350_000)
EXTBENCH = Path(__file__).resolve().parent.parent.parent / "shared" / "extbench"
DIRECT, BARE, TRAFILATURA = "direct (nginx GET)", "bare relay", "trafilatura relay"
TEXT = "text relay"
RAW, MARKDOWN = "gateway raw", "gateway auto (markdown)"
RAW_TARGET = 0.75  # gateway raw req/s over the text relay's (the research note's relay)
MARKDOWN_TARGET = 2.0  # gateway auto req/s over the trafilatura relay's
# the goals beyond those targets: auto over the trafilatura relay, auto over raw at c=1, and
# auto at the highest concurrency over auto at c=1 (both cores extract)
MARKDOWN_GOAL, MARKDOWN_RAW_GOAL, MARKDOWN_SCALING_GOAL = 8.0, 0.3, 1.7
NGINX_TUNING = ("sendfile on;", "tcp_nopush off;", "tcp_nodelay on;")  # as in the research anchor

VOCABULARY = (
    "agent gateway policy request network address domain resolver audit record envelope "
    "signature content extraction markdown latency throughput connection keepalive upstream "
    "sandbox egress proxy tunnel certificate header response status cache search result page "
    "article reader model tool call decision rule default allow deny private public metadata "
    "the a of to and in that is for on with as by it from at this be are was an or which their "
    "has have not but more its new can also one two first year data system people time security "
    "team review operator deployment incident analysis report quarter budget"
)
# Real articles are rarely pure ASCII: typographic apostrophes, dashes and names with accents.
NON_ASCII = ("it’s", "don’t", "—", "café", "Zürich", "naïve", "€12", "“quoted”", "São Paulo")
WORDS = tuple(VOCABULARY.split()) + NON_ASCII


def sentence(rng: random.Random, low: int = 9, high: int = 24) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
    text = " ".join(words)
    return text[:1].upper() + text[1:] + rng.choice(".......?!")


def article_page(size: int = PAGE_BYTES, seed: int = 7) -> bytes:
    """A news-article page of about `size` bytes: head with styles and scripts, navigation,
    the article (headings, paragraphs with links, a list, a table, a figure, a code block),
    related links, comments and a footer, as boilerplate-heavy as real pages are."""
    rng = random.Random(seed)
    nav = "".join(f'<li><a href="/section/{w}">{w.title()}</a></li>' for w in rng.sample(WORDS, 24))
    head = textwrap.dedent(
        f"""\
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8">
        <title>Egress gateways for agents: what a year of audits taught us | Example News</title>
        <meta name="description" content="{sentence(rng)}">
        <meta property="og:title" content="Egress gateways for agents">
        <link rel="stylesheet" href="/static/site.css">
        <style>body{{font-family:serif;margin:0}} .nav li{{display:inline}} .ad{{display:none}}
        article p{{line-height:1.6}} .related a{{color:#06c}} footer{{font-size:small}}</style>
        <script>window.dataLayer=window.dataLayer||[];function gtag(){{dataLayer.push(arguments)}}
        gtag('js',new Date());gtag('config','G-XXXX');var t={rng.randint(0, 10**9)};</script>
        <script type="application/ld+json">{{"@type":"NewsArticle","headline":"Egress gateways"}}
        </script></head><body>
        <header class="site-header"><a class="logo" href="/">Example News</a>
        <nav class="nav"><ul>{nav}</ul></nav>
        <form class="search" action="/search"><input name="q"><button>Search</button></form>
        </header>
        <div class="ad" id="ad-top">Advertisement</div>
        <main><article>
        <h1>Egress gateways for agents: what a year of audits taught us</h1>
        <p class="byline">By <a href="/authors/r">R. Writer</a>, <time>2026-03-14</time></p>
        """
    )
    tail_parts = ["</article>", '<aside class="related"><h2>Related</h2><ul>']
    tail_parts += [f'<li><a href="/2026/{i}">{sentence(rng, 5, 9)}</a></li>' for i in range(12)]
    tail_parts.append('</ul></aside><section class="comments"><h2>Comments</h2>')
    tail_parts += [
        f'<div class="comment"><b>user{i}</b><p>{sentence(rng)}</p></div>' for i in range(8)
    ]
    tail_parts.append("</section></main><footer><p>&copy; 2026 Example News</p><ul>")
    tail_parts += [f'<li><a href="/about/{w}">{w}</a></li>' for w in rng.sample(WORDS, 16)]
    tail_parts.append("</ul></footer><script>console.log('done')</script></body></html>\n")
    tail = "\n".join(tail_parts)

    body: list[str] = []
    budget = size - len(head.encode()) - len(tail.encode())
    used = 0
    section = 0
    while used < budget:
        section += 1
        block = [f"<h2>{sentence(rng, 3, 7).rstrip('.?!')}</h2>"]
        for _ in range(rng.randint(3, 6)):
            parts = [sentence(rng) for _ in range(rng.randint(3, 6))]
            link = rng.randrange(len(parts))
            parts[link] = f'<a href="/2026/{section}/{link}">{parts[link]}</a>'
            emphasis = rng.randrange(len(parts))
            if emphasis != link:
                parts[emphasis] = f"<em>{parts[emphasis]}</em>"
            block.append("<p>" + " ".join(parts) + "</p>")
        if section % 3 == 0:
            items = "".join(f"<li>{sentence(rng, 4, 10)}</li>" for _ in range(5))
            block.append(f"<ul>{items}</ul>")
        if section % 4 == 0:
            rows = "".join(
                f"<tr><td>{rng.choice(WORDS)}</td><td>{rng.randint(1, 999)}</td>"
                f"<td>{rng.random():.2f}</td></tr>"
                for _ in range(6)
            )
            block.append(f"<table><tr><th>name</th><th>count</th><th>share</th></tr>{rows}</table>")
        if section % 5 == 0:
            block.append(
                f'<figure><img src="/img/{section}.jpg" alt="{sentence(rng, 3, 6)}">'
                f"<figcaption>{sentence(rng, 5, 10)}</figcaption></figure>"
            )
        if section % 6 == 0:
            block.append(
                f"<pre><code>curl -X POST /v1/fetch -d '{{\"n\": {section}}}'</code></pre>"
            )
        text = "\n".join(block) + "\n"
        used += len(text.encode())
        body.append(text)
    page = (head + "".join(body) + tail).encode()
    return page


def gateway_files(folder: Path, gateway_port: int, nginx_port: int) -> Path:
    write_page_policy(
        folder, "bench-fetch", HOST, nginx_port, extra=f"limits: {{max_chars: {MAX_CHARS}}}\n"
    )
    return write_gateway_config(
        folder / "gateway.yaml", port=gateway_port, instance="bench", host=HOST
    )


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str
    body: bytes | None  # None: GET
    pid: int
    slow: bool = False


def post(url: str, payload: dict[str, object]) -> tuple[dict[str, object], int]:
    """The JSON answer and its size in bytes."""
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        raw = resp.read()
    answer: dict[str, object] = json.loads(raw)
    return answer, len(raw)


def check_targets(targets: list[Target], page: bytes) -> list[str]:
    """One request per target before timing anything: each must answer the whole page."""
    sha = hashlib.sha256(page).hexdigest()
    notes = []
    for target in targets:
        if target.body is None:
            with urllib.request.urlopen(target.url, timeout=10) as resp:
                if resp.read() != page:
                    sys.exit(f"{target.name}: nginx served a different page")
            continue
        answer, size = post(target.url, json.loads(target.body))
        if "envelope" in answer:
            envelope = answer["envelope"]
            assert isinstance(envelope, dict)
            if envelope.get("body_sha256") != sha or envelope.get("truncated"):
                sys.exit(f"{target.name}: unexpected envelope {envelope}")
            notes.append(
                f"{target.name}: {envelope['extract_mode']} text of {envelope['total_chars']} "
                f"chars, response {size} bytes"
            )
        else:
            if answer.get("sha256") != sha:
                sys.exit(f"{target.name}: unexpected answer {str(answer)[:300]}")
            if "content" in answer:
                notes.append(f"{target.name}: content of {len(str(answer['content']))} chars")
    return notes


@dataclass(frozen=True, slots=True)
class Cell:
    result: LoadResult
    cpu_seconds: float  # the target's process tree, during the timed requests

    @property
    def cpu_percent(self) -> float:
        return 100 * self.cpu_seconds / self.result.seconds if self.result.seconds else 0.0

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.cpu_seconds / self.result.requests if self.result.requests else 0.0


def measure(load: LoadGenerator, target: Target, concurrency: int, requests: int) -> Cell:
    # The warm-up fills the servers' upstream pools; its CPU stays out of the figures.
    cpu_before = [0.0]

    def snapshot() -> None:
        cpu_before[0] = tree_cpu_seconds(target.pid)

    result = load.run(
        target.url,
        body=target.body,
        concurrency=concurrency,
        requests=requests,
        warmup=max(concurrency, 4),
        on_warm=snapshot,
    )
    return Cell(result, tree_cpu_seconds(target.pid) - cpu_before[0])


def profile(py_spy: str, target: Target, concurrency: int, requests: int, out: Path) -> None:
    """Sample the gateway under load and print where its active threads spend their time."""
    spy = subprocess.Popen(
        [py_spy, "record", "--pid", str(target.pid), "--rate", "200", "--gil", "--format", "raw",
         "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    time.sleep(1.5)
    run_load(target.url, body=target.body, concurrency=concurrency, requests=requests)
    spy.send_signal(2)
    _, err = spy.communicate(timeout=60)
    if not out.exists():
        print(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        return
    inclusive, own, total = profile_counts(out)
    print(f"\nprofile of gateway, {target.name}, c={concurrency}: {total} samples (active threads)")
    print("  inclusive (gateway code):")
    gateway = [(n, c) for n, c in inclusive.most_common() if "gateway/" in n]
    for name, count in gateway[:22]:
        print(f"    {100 * count / total:5.1f}%  {name}")
    print("  self (any code):")
    for name, count in own.most_common(15):
        print(f"    {100 * count / total:5.1f}%  {name}")


def real_pages(count: int) -> list[tuple[str, bytes]]:
    """`count` pages of REAL_PAGE_BYTES from the extraction sets, half from each (WCXB dev
    first), picked evenly from their sorted names: (name, HTML)."""
    from extraction import SHARED  # noqa: PLC0415 (only this option needs the data sets)

    picked: list[tuple[str, bytes]] = []
    for folder, share in (("wcxb-dev", count - count // 2), ("scrapinghub", count // 2)):
        if share <= 0:
            continue
        sized = []
        for path in sorted(SHARED.glob(f"{folder}/html/*.html.gz")):
            html = gzip.decompress(path.read_bytes())
            if REAL_PAGE_BYTES[0] <= len(html) <= REAL_PAGE_BYTES[1]:
                # scrapinghub's names are 64 hex digits: 12 name a page well enough
                sized.append((f"{folder}/{path.name.removesuffix('.html.gz')[:12]}", html))
        if len(sized) < share:
            sys.exit(f"only {len(sized)} pages of {REAL_PAGE_BYTES} bytes under {SHARED}/{folder}")
        step = len(sized) / share
        picked += [sized[int(index * step + step / 2)] for index in range(share)]
    return picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000, help="per cell per round")
    parser.add_argument(
        "--slow-requests", type=int, default=200, help="per cell per round, extraction targets"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway afterwards")
    parser.add_argument(
        "--only", nargs="+", choices=["raw", "markdown"], help="measure only these gateway modes"
    )
    parser.add_argument(
        "--real-pages", type=int, default=0, metavar="N",
        help="also measure N real pages of 100-350 KB from ../shared/extbench",
    )
    args = parser.parse_args()

    page = article_page()
    pages = [("generated article", PAGE_PATH, page)]
    pages += [
        (name, f"/real/{name.replace('/', '-')}.html", html)
        for name, html in real_pages(args.real_pages)
    ]
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as temp, Children() as children:
        folder = Path(temp)
        folder.chmod(0o755)  # nginx workers may run as another user
        for _, path, html in pages:
            (folder / "www" / path.rsplit("/", 1)[0].lstrip("/")).mkdir(
                parents=True, exist_ok=True
            )
            (folder / "www" / path.lstrip("/")).write_bytes(html)
        nginx_port, gateway_port, bare_port, traf_port, text_port = free_ports(5)
        nginx = start_nginx(children, folder, nginx_config(folder, nginx_port, tuning=NGINX_TUNING))
        config = gateway_files(folder, gateway_port, nginx_port)
        gateway = start_gateway(children, config, log=folder / "gateway.log")
        relay = str(Path(__file__).resolve().parent / "relays.py")
        bare = children.start(
            [sys.executable, relay, "--kind", "bare", "--port", str(bare_port)],
            log=folder / "bare.log",
        )
        traf = children.start(
            [sys.executable, relay, "--kind", "trafilatura", "--port", str(traf_port)],
            log=folder / "trafilatura.log",
        )
        text = children.start(
            [sys.executable, relay, "--kind", "text", "--port", str(text_port)],
            log=folder / "text.log",
        )
        wait_for_ports(
            folder,
            [
                (nginx, nginx_port),
                (gateway, gateway_port),
                (bare, bare_port),
                (traf, traf_port),
                (text, text_port),
            ],
            logs=("nginx-error.log", "gateway.log", "bare.log", "trafilatura.log", "text.log"),
        )
        api = "/v1/fetch"

        def page_targets(path: str) -> list[Target]:
            page_url = f"http://127.0.0.1:{nginx_port}{path}"
            gateway_page = f"http://{HOST}:{nginx_port}{path}"

            def gateway_body(mode: str) -> bytes:
                return json.dumps(
                    {"url": gateway_page, "extract_mode": mode, "max_chars": MAX_CHARS}
                ).encode()

            relay_body = json.dumps({"url": page_url}).encode()
            targets = [
                Target(DIRECT, page_url, None, nginx.pid),
                Target(BARE, f"http://127.0.0.1:{bare_port}{api}", relay_body, bare.pid),
                Target(TEXT, f"http://127.0.0.1:{text_port}{api}", relay_body, text.pid),
                Target(
                    RAW, f"http://127.0.0.1:{gateway_port}{api}", gateway_body("raw"), gateway.pid
                ),
                Target(
                    MARKDOWN,
                    f"http://127.0.0.1:{gateway_port}{api}",
                    gateway_body("auto"),
                    gateway.pid,
                    slow=True,
                ),
                Target(
                    TRAFILATURA,
                    f"http://127.0.0.1:{traf_port}{api}",
                    relay_body,
                    traf.pid,
                    slow=True,
                ),
            ]
            if args.only:
                # Each gateway mode keeps the yardstick it is judged against.
                keep = {DIRECT, BARE, *([RAW, TEXT] if "raw" in args.only else [])}
                keep |= {MARKDOWN, TRAFILATURA} if "markdown" in args.only else set()
                targets = [target for target in targets if target.name in keep]
            return targets

        targets = page_targets(PAGE_PATH)
        notes = check_targets(targets, page)
        print(
            f"page: {len(page)} bytes of HTML at {PAGE_PATH}; {args.rounds} rounds; "
            f"{args.requests} requests per cell ({args.slow_requests} for extraction targets); "
            f"load generator: aiohttp, own process, keep-alive"
        )
        for note in notes:
            print(f"  {note}")
        real = [
            (name, [t for t in page_targets(path) if t.name != DIRECT], html)
            for name, path, html in pages[1:]
        ]
        for name, real_targets, html in real:
            print(f"real page {name}: {len(html)} bytes")
            for note in check_targets(real_targets, html):
                print(f"  {note}")

        cells: dict[tuple[int, str], list[Cell]] = defaultdict(list)
        real_cells: dict[str, dict[tuple[int, str], list[Cell]]] = {
            name: defaultdict(list) for name, _, _ in real
        }
        with LoadGenerator() as load:
            for round_index in range(args.rounds):
                for concurrency in args.concurrency:
                    for target in rotated(targets, round_index):
                        count = args.slow_requests if target.slow else args.requests
                        cell = measure(load, target, concurrency, max(count, concurrency))
                        cells[(concurrency, target.name)].append(cell)
                    for name, real_targets, _ in real:
                        for target in rotated(real_targets, round_index):
                            # real pages cost more each: half the requests per cell
                            count = (args.slow_requests if target.slow else args.requests) // 2
                            cell = measure(load, target, concurrency, max(count, concurrency))
                            real_cells[name][(concurrency, target.name)].append(cell)
                print(f"  round {round_index + 1}/{args.rounds} done", file=sys.stderr)

        report(targets, cells, args.concurrency)
        if real:
            report_real(real_cells, args.concurrency)

        if args.profile:
            spy = py_spy_binary(folder)
            for target in [t for t in targets if t.name in (RAW, MARKDOWN)]:
                profile(spy, target, max(args.concurrency), 
                        args.slow_requests * 3 if target.slow else args.requests * 3,
                        folder / f"profile-{target.name.split()[1]}.txt")  # fmt: skip


def report_real(
    real_cells: dict[str, dict[tuple[int, str], list[Cell]]], levels: list[int]
) -> None:
    """Per real page: req/s of raw, auto and the trafilatura relay, and the target ratios."""
    low, high = min(levels), max(levels)
    print(
        f"\n| real page | raw c={low} | auto c={low} | auto c={high} | trafilatura c={low} "
        f"| trafilatura c={high} | auto/raw c={low} | auto/trafilatura c={low} "
        f"| auto/trafilatura c={high} | auto c={high}/c={low} |"
        "\n|---|---|---|---|---|---|---|---|---|---|"
    )
    summary: dict[str, list[float]] = defaultdict(list)
    for name, cells in real_cells.items():
        def rps(concurrency: int, target: str, cells: dict = cells) -> str:
            runs = cells[(concurrency, target)]
            return f"{median([c.result.rps for c in runs]):.0f}" if runs else "-"

        ratios = {}
        for key, (a, b) in {
            "auto/raw": ((low, MARKDOWN), (low, RAW)),
            "auto/trafilatura low": ((low, MARKDOWN), (low, TRAFILATURA)),
            "auto/trafilatura high": ((high, MARKDOWN), (high, TRAFILATURA)),
            "auto high/low": ((high, MARKDOWN), (low, MARKDOWN)),
        }.items():
            if cells[a] and cells[b]:
                ratios[key] = ratio_per_round(cells[a], cells[b])
                summary[key].append(ratios[key])
        shown = [
            f"{ratios[key]:.2f}" if key in ratios else "-"
            for key in ("auto/raw", "auto/trafilatura low", "auto/trafilatura high",
                        "auto high/low")
        ]  # fmt: skip
        print(
            f"| {name} | {rps(low, RAW)} | {rps(low, MARKDOWN)} | {rps(high, MARKDOWN)} "
            f"| {rps(low, TRAFILATURA)} | {rps(high, TRAFILATURA)} | " + " | ".join(shown) + " |"
        )
    print()
    for key, goal in (
        ("auto/raw", MARKDOWN_RAW_GOAL),
        ("auto/trafilatura low", MARKDOWN_GOAL),
        ("auto/trafilatura high", MARKDOWN_GOAL),
        ("auto high/low", MARKDOWN_SCALING_GOAL),
    ):
        if summary[key]:
            value = median(summary[key])
            print(
                f"real pages, median {key}: {value:.2f} "
                f"(target >= {goal}: {'met' if value >= goal else 'MISSED'})"
            )


def ratio_per_round(cells: list[Cell], base: list[Cell]) -> float:
    return median([c.result.rps / b.result.rps for c, b in zip(cells, base, strict=True)])


def cpu_ratio(cells: list[Cell], base: list[Cell]) -> float:
    """Base CPU per request over this target's: the req/s ratio if both had a core to
    themselves, and less disturbed by other load on the machine than req/s."""
    return median(
        [b.cpu_ms_per_request / c.cpu_ms_per_request for c, b in zip(cells, base, strict=True)]
    )


def report(
    targets: list[Target], cells: dict[tuple[int, str], list[Cell]], levels: list[int]
) -> None:
    print(
        "\n| c | target | req/s | × bare relay | p50 ms | p99 ms | CPU % | CPU ms/req | failed |"
        "\n|---|---|---|---|---|---|---|---|---|"
    )
    for concurrency in levels:
        base = cells[(concurrency, BARE)]
        for target in targets:
            runs = cells[(concurrency, target.name)]
            if not runs:
                continue
            print(
                f"| {concurrency} | {target.name} "
                f"| {median([c.result.rps for c in runs]):.0f} "
                f"| {ratio_per_round(runs, base):.2f} "
                f"| {median([c.result.p50_ms for c in runs]):.2f} "
                f"| {median([c.result.p99_ms for c in runs]):.2f} "
                f"| {median([c.cpu_percent for c in runs]):.0f} "
                f"| {median([c.cpu_ms_per_request for c in runs]):.2f} "
                f"| {sum(c.result.failures for c in runs)} |"
            )
    failures = [
        (key, c.result.failure_sample)
        for key, runs in cells.items()
        for c in runs
        if c.result.failures
    ]
    if failures:
        print(f"\nfailed requests, first: {failures[0]}")
    print()
    for concurrency in levels:
        for name, base_name, goal in (
            (RAW, TEXT, RAW_TARGET),
            (RAW, BARE, None),
            (MARKDOWN, TRAFILATURA, MARKDOWN_TARGET),
        ):
            runs, base = cells[(concurrency, name)], cells[(concurrency, base_name)]
            if not runs or not base:
                continue  # not measured (--only)
            ratio = ratio_per_round(runs, base)
            verdict = (
                f"target >= {goal:.2f}: {'met' if ratio >= goal else 'MISSED'}"
                if goal is not None
                else "context: this relay never sends the page back"
            )
            if name == MARKDOWN:
                verdict += f"; goal >= {MARKDOWN_GOAL:.2f}: " + (
                    "met" if ratio >= MARKDOWN_GOAL else "MISSED"
                )
            print(
                f"c={concurrency}: {name} / {base_name} req/s = {ratio:.2f} ({verdict}); "
                f"by CPU per request {cpu_ratio(runs, base):.2f}"
            )
    low, high = min(levels), max(levels)
    goals = [(f"c={low}: {MARKDOWN} / {RAW}", (low, MARKDOWN), (low, RAW), MARKDOWN_RAW_GOAL)]
    if high != low:
        goals.append((f"{MARKDOWN} c={high} / c={low}", (high, MARKDOWN), (low, MARKDOWN),
                      MARKDOWN_SCALING_GOAL))  # fmt: skip
    for label, key, base_key, goal in goals:
        runs, base = cells[key], cells[base_key]
        if runs and base:
            ratio = ratio_per_round(runs, base)
            verdict = "met" if ratio >= goal else "MISSED"
            print(f"{label} req/s = {ratio:.2f} (goal >= {goal:.2f}: {verdict})")


if __name__ == "__main__":
    main()
