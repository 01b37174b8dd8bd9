"""The extraction pool: worker processes give what inline extraction gives, and a dead or
stuck worker costs one failed call, never the pool."""

from __future__ import annotations

import hashlib

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
