"""The extraction pool: worker processes give what inline extraction gives, and a dead or
stuck worker costs one failed call, never the pool."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal

import pytest

from gateway.tools import extraction
from gateway.tools.extraction import ExtractionPool, ExtractionPoolError, prepare

PAGE = (
    "<html><head><title>Report</title><meta name='description' content='Long'></head><body>"
    + "".join(
        f"<p>Paragraph {i} of the report, with commas, and enough words to be prose.</p>"
        for i in range(400)
    )
    + "</body></html>"
).encode()


@pytest.fixture
def pool():
    made = ExtractionPool(workers=1)
    yield made
    made.close()


async def test_workers_give_what_inline_extraction_gives(pool) -> None:
    remote = await pool.prepare(PAGE, "text/html", "auto")
    local = prepare(PAGE, "text/html", "auto")
    assert remote.clean == local.clean and remote.text_sha256 == local.text_sha256
    assert remote.text_sha256 == hashlib.sha256(local.clean.text.encode()).hexdigest()
    assert (remote.title, remote.description) == ("Report", "Long")
    assert remote.extraction == {"main_content": True}


async def test_a_dead_worker_fails_one_call_and_the_pool_recovers(pool) -> None:
    await pool.prepare(PAGE, "text/html", "text")
    for process in list(pool._executor._processes.values()):
        process.kill()
        process.join()
    with pytest.raises(ExtractionPoolError, match="stopped"):
        await pool.prepare(PAGE, "text/html", "text")
    again = await pool.prepare(PAGE, "text/html", "text")
    assert again.clean.text.startswith("Paragraph 0 of the report")


async def test_a_worker_past_the_hard_timeout_is_replaced(pool, monkeypatch) -> None:
    monkeypatch.setattr(extraction, "EXTRACT_DEADLINE", 0.0)
    monkeypatch.setattr(extraction, "HARD_TIMEOUT_GRACE", 0.0)
    before = pool._executor
    with pytest.raises(ExtractionPoolError, match="deadline"):
        await pool.prepare(PAGE, "text/html", "text")
    assert pool._executor is not before
    monkeypatch.undo()
    assert (await pool.prepare(PAGE, "text/html", "text")).extraction == {"main_content": True}


def _children(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is `pid`, from /proc."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")
async def test_workers_exit_when_the_gateway_is_killed(tmp_path, aiohttp_server) -> None:
    """`kill -9` of a real `gateway serve`: its extraction workers, reparented, notice the
    parent is gone and exit on their own (nothing else would ever stop them)."""
    from aiohttp import ClientSession, web

    from tests.conftest import loopback_policy
    from tests.processes import GatewayProcess

    async def page(request: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_get("/report", page)
    site = await aiohttp_server(app, host="127.0.0.1")
    (tmp_path / "policy.yaml").write_text(loopback_policy(site.port))
    gateway = GatewayProcess(
        tmp_path,
        {
            "policy": str(tmp_path / "policy.yaml"),
            "audit": {"path": str(tmp_path / "audit" / "g-{instance}.jsonl")},
            "resolver": {"hosts": {"site.example.com": ["127.0.0.1"]}},
        },
    )
    await gateway.start()
    workers: set[int] = set()
    try:
        url = f"http://site.example.com:{site.port}/report"
        async with (
            ClientSession() as session,  # a page large enough for the pool
            session.post(f"{gateway.url}/v1/fetch", json={"url": url}) as response,
        ):
            assert response.status == 200, await response.text()
        assert gateway.process is not None
        workers = _children(gateway.process.pid)
        assert workers, "no extraction worker was started"
        gateway.signal(signal.SIGKILL)  # no shutdown code runs in the gateway
        for _ in range(200):  # bounded: 20 s at most
            if not any(_alive(pid) for pid in workers):
                break
            await asyncio.sleep(0.1)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived the gateway"
    finally:
        for pid in workers:  # never left behind, even when the test fails; first, since an
            if _alive(pid):  # orphan holding the gateway's stderr would keep its pipe open
                os.kill(pid, signal.SIGKILL)
        await gateway.kill()
