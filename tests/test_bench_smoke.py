"""The bench scripts run end to end in a tiny mode and print their figures.

Speed is never asserted here (benchmarks measure it); these only catch a bench that no
longer starts, crashes, fails requests or prints no numbers. Each runs as a subprocess, as
a user would run it, from the repository root.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NUMBER = r"[0-9]+(?:\.[0-9]+)?"


def fetch_rows(output: str) -> dict[tuple[str, str], list[str]]:
    """The fetch table's cells by (concurrency, target)."""
    rows = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].isdigit():
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def check_fetch(output: str) -> None:
    rows = fetch_rows(output)
    targets = (
        "direct (nginx GET)",
        "bare relay",
        "text relay",
        "gateway raw",
        "gateway auto (markdown)",
        "trafilatura relay",
    )
    assert set(rows) == {(c, t) for c in ("1", "2") for t in targets}, output
    for (concurrency, target), cells in rows.items():
        rps, ratio, p50, p99, _cpu, _cpu_per_request, failed = cells
        assert float(rps) > 0 and float(p50) > 0 and float(p99) >= float(p50), (target, cells)
        assert failed == "0", (concurrency, target, output)
    # The bench itself checks that each answer carries the whole page (body hash, untruncated).
    assert re.search(r"gateway raw: raw text of [0-9]+ chars", output), output
    for concurrency in ("1", "2"):
        assert re.search(rf"c={concurrency}: gateway raw / bare relay req/s = {NUMBER}", output)
        assert re.search(rf"c={concurrency}: gateway raw / text relay req/s = {NUMBER}", output)
        assert re.search(
            rf"c={concurrency}: gateway auto \(markdown\) / trafilatura relay req/s = {NUMBER}",
            output,
        )


def check_policy_decide(output: str) -> None:
    for label in ("10 rules", "300 rules"):
        assert re.search(rf"^{label}\s+[0-9]+\s+{NUMBER}\s+{NUMBER}$", output, re.M), output
    assert re.search(rf"ratio 300 rules / 10 rules \(median\): {NUMBER}", output)
    assert re.search(r"load of the 300 rules policy: [0-9]+ ms", output)


def check_policy_load(output: str) -> None:
    assert re.search(rf"policy load: 200 domain rules, .*median {NUMBER} ms", output), output


def check_markers(output: str) -> None:
    assert re.search(rf"english markdown\s+10\s+{NUMBER}", output), output


def check_review(output: str) -> None:
    assert re.search(rf"newest page, 3 MB / 1 MB: {NUMBER}x", output), output
    assert re.search(rf"filtered view / grep -F: {NUMBER}x", output), output
    assert re.search(r"peak traced memory, newest, 3 MB: [0-9]+ KB", output), output


def check_passages(output: str) -> None:
    assert re.search(rf"passage ranking / page extraction: {NUMBER} median", output), output
    assert "generated articles" in output, output


def check_fusion(output: str) -> None:
    assert re.search(rf"five fused / one: {NUMBER}", output), output


def check_search(output: str) -> None:
    assert re.search(rf"cached search: {NUMBER} ms median", output), output
    assert re.search(rf"uncached overhead over the provider: {NUMBER} ms", output), output


def check_replicas(output: str) -> None:
    for target in ("1 replica", "2 replicas"):
        row = re.search(rf"^\| {target}\s+\|(.*)\|$", output, re.M)
        assert row, output
        rps, p50, p99, trips, failed = (cell.strip() for cell in row.group(1).split("|"))
        assert float(rps) > 0 and float(p99) >= float(p50) > 0 and failed == "0", row.group(0)
    common = re.search(rf"round trips per request on the common path: ({NUMBER})", output)
    assert common and float(common.group(1)) <= 1.0, output  # a count, not a speed


def check_proxy(output: str) -> None:
    page, _, small = output.partition("forward proxy, 1 KB page")
    assert small, output
    rows = {}
    for line in small.splitlines():
        cells = line.split()
        if cells and cells[0] == "gateway":
            c1, p50, c64, p99, _cpu, fail = cells[1:]
            assert float(c1) > 0 and float(c64) > 0 and float(p99) >= float(p50) > 0, cells
            assert fail == "0", cells
            rows["gateway"] = cells
    assert rows, small
    rows = {}
    for line in page.splitlines():
        cells = line.split()
        if cells and cells[0] in ("gateway", "asyncio-tunnel", "aiohttp-relay"):
            rows[cells[0]] = cells[1:]
    assert set(rows) == {"gateway", "asyncio-tunnel", "aiohttp-relay"}, output
    c1, p50, c64, p99, cpu, fail, connect, _cpu_mb, _kb = rows["gateway"]
    assert float(c1) > 0 and float(c64) > 0 and float(p99) >= float(p50) > 0, rows["gateway"]
    assert fail == "0" and float(connect) > 0, rows["gateway"]
    assert float(rows["asyncio-tunnel"][6]) > 0 and float(rows["aiohttp-relay"][2]) > 0, rows
    assert re.search(rf"gateway: one 1 MB GET through the tunnel takes p50 {NUMBER} ms", output)


def needs_nginx_and_curl() -> str | None:
    """The proxy bench's CONNECT load is curl -p -x (Debian curl)."""
    return needs_nginx() or (None if shutil.which("curl") else "curl is not installed")


def check_proxy_under_wrk(output: str) -> None:
    """`--load wrk`: the 1 KB cells come from wrk's own summary (its Lua script's JSON)."""
    _, _, small = output.partition("forward proxy, 1 KB page")
    rows = [line.split() for line in small.splitlines() if line.split()[:1] == ["gateway"]]
    assert len(rows) == 1, output
    c1, p50, c64, p99, cpu, fail = rows[0][1:]
    assert float(c1) > 0 and float(c64) > 0 and float(p99) >= float(p50) > 0, rows
    assert float(cpu) > 0 and fail == "0", rows


def needs_nginx_curl_and_wrk() -> str | None:
    return needs_nginx_and_curl() or (None if shutil.which("wrk") else "wrk is not installed")


def needs_nginx_and_redis() -> str | None:
    if not shutil.which("redis-server"):
        return "redis-server is not installed (Debian redis-server)"
    return needs_nginx()


def needs_nginx() -> str | None:
    found = shutil.which("nginx") or Path("/usr/sbin/nginx").exists()
    return None if found else "nginx is not installed (Debian nginx-light)"


def needs_nginx_and_trafilatura() -> str | None:
    """The fetch bench's yardstick relay extracts with trafilatura (`pip install -e '.[bench]'`)."""
    if importlib.util.find_spec("trafilatura") is None:
        return "trafilatura is not installed (pip install -e '.[bench]')"
    return needs_nginx()


def check_dlp(output: str) -> None:
    assert re.search(r"real URLs: [0-9]+ distinct links", output), output
    assert re.search(rf"default detectors: [0-9]+ of [0-9]+ flagged = {NUMBER}%", output), output
    assert re.search(rf"entropy detector on paths and queries .* = {NUMBER}%", output), output
    assert re.search(r"planted secrets: ([0-9]+) of \1 caught \(met\)", output), output
    assert re.search(rf"shipped \(report\): adds -?{NUMBER} µs = -?{NUMBER}x", output), output
    assert len(re.findall(r"URL of [0-9]+ chars \(shipped\): DLP adds", output)) == 3, output


def check_extraction(output: str) -> None:
    assert re.search(rf"\| gateway auto \| {NUMBER} \| {NUMBER} \| {NUMBER} \|", output), output
    assert "| gateway text +header |" in output, output
    assert re.search(r"target gateway auto: >= 4x trafilatura's pages/s", output), output
    assert re.search(rf"- heading: on [0-9]+/[0-9]+ .* word-F1 {NUMBER}", output), output
    assert re.search(r"scrapinghub: [0-9]+ pages", output), output


def needs_extbench() -> str | None:
    """The DLP bench reads the extraction sets' pages (../shared/extbench from the root)."""
    root = Path(os.environ.get("EXTBENCH", REPO.parent / "shared" / "extbench"))
    if not (root / "scrapinghub").is_dir() or not (root / "wcxb-dev").is_dir():
        return f"no extraction benchmark data under {root}"
    return None


CASES = [
    pytest.param(
        "fetch.py",
        ["--rounds", "1", "--requests", "10", "--slow-requests", "2", "--concurrency", "1", "2"],
        check_fetch,
        needs_nginx_and_trafilatura,
        id="fetch",
    ),
    pytest.param(
        "policy_decide.py",
        ["--rounds", "1", "--urls", "600", "--rules", "300"],
        check_policy_decide,
        None,
        id="policy_decide",
    ),
    pytest.param(
        "policy_load.py",
        ["--rounds", "1", "--rules", "200"],
        check_policy_load,
        None,
        id="policy_load",
    ),
    pytest.param("markers.py", ["--rounds", "1", "--kb", "10"], check_markers, None, id="markers"),
    pytest.param(
        "search.py", ["--rounds", "1", "--requests", "10"], check_search, None, id="search"
    ),
    pytest.param(
        "search.py",
        ["passages", "--rounds", "1", "--data", "no-such-folder"],
        check_passages,
        None,
        id="search-passages",
    ),
    pytest.param(
        "search.py",
        ["fusion", "--rounds", "1", "--requests", "2"],
        check_fusion,
        None,
        id="search-fusion",
    ),
    pytest.param(
        "proxy.py",
        ["--quick", "--only", "gateway", "asyncio-tunnel", "aiohttp-relay"],
        check_proxy,
        needs_nginx_and_curl,
        id="proxy",
    ),
    pytest.param(
        "proxy.py",
        ["--quick", "--load", "wrk", "--only", "gateway", "--sizes", "1k", "--no-idle"],
        check_proxy_under_wrk,
        needs_nginx_curl_and_wrk,
        id="proxy-wrk",
    ),
    pytest.param(
        "review.py",
        ["--rounds", "1", "--small-mb", "1", "--big-mb", "3", "--records", "5000", "--rare", "5"],
        check_review,
        None,
        id="review",
    ),
    pytest.param(
        "dlp.py", ["--rounds", "1", "--max-pages", "10"], check_dlp, needs_extbench, id="dlp"
    ),
    pytest.param(
        "extraction.py", ["--every", "150", "--workers", "1"], check_extraction, needs_extbench,
        id="extraction",
    ),
    pytest.param(
        "replicas.py",
        ["--rounds", "1", "--requests", "20", "--concurrency", "2"],
        check_replicas,
        needs_nginx_and_redis,
        id="replicas",
    ),
]


@pytest.mark.parametrize(("script", "args", "check", "requirement"), CASES)
def test_bench_runs_in_tiny_mode(script, args, check, requirement) -> None:
    path = REPO / "bench" / script
    if not path.exists():
        pytest.skip(f"bench/{script} is not written yet")
    missing = requirement() if requirement else None
    if missing:
        pytest.skip(missing)
    done = subprocess.run(
        [sys.executable, str(path), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    check(done.stdout)
