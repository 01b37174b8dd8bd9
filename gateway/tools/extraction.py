"""A fetched body made ready for the agent (extracted, sanitised, hashed), and the worker
processes that do it for large HTML pages.

Extraction is CPU-bound Python: in a thread it holds the GIL, so the event loop stalls while
it runs and a second core stays idle. In worker processes the loop stays free, pages are
extracted on every core at once, and a worker's memory is capped. Workers are spawned, never
forked from a process with threads and an event loop, and import only this module's few
dependencies. A worker exits as soon as the gateway that started it is gone, even after a
`kill -9`: a watchdog thread waits on the parent's sentinel (a pipe that closes when the parent
dies), polling `getppid()` where there is none. Sanitising runs in the worker too, right after
extraction: what comes back is already what the agent may see, so no converter output reaches
it around the sanitiser.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import os
import resource
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_for_ready
from typing import Any

from gateway.extract import Document, extract
from gateway.provenance.markers import Sanitized, sanitize

EXTRACT_DEADLINE = 10.0  # seconds of extraction work, checked as it goes
# past the deadline and this grace, the worker is presumed stuck and the pool is replaced
HARD_TIMEOUT_GRACE = 5.0
MAX_HEADINGS = 64
MAX_WORKERS = 4
WORKER_MEMORY_BYTES = 2 << 30  # address space of one worker
PARENT_POLL_SECONDS = 1.0  # without a parent sentinel: how often a worker checks its parent


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a WebFetch answer needs of a body: only that crosses back from a worker (no
    unsanitised text, no second copy of the text in UTF-8)."""

    mode: str  # the mode extraction applied (Document.mode)
    clean: Sanitized  # the sanitised text (its `utf8` left out)
    text_sha256: str  # of clean.text in UTF-8
    title: str | None
    description: str | None
    headings: tuple[tuple[int, str], ...]
    extraction: dict[str, Any] | None


def extraction_summary(document: Document) -> dict[str, Any] | None:
    """What the answer says about main-content selection (HTML only, never for `raw`)."""
    if document.main_content is None:
        return None
    summary: dict[str, Any] = {"main_content": document.main_content}
    if document.note:
        summary["note"] = document.note
    return summary


def prepare(
    body: bytes, content_type: str, mode: str, body_sha256: str = "", base_url: str | None = None
) -> Prepared:
    """The extracted document (links resolved against `base_url`), its sanitised text and
    that text's hash, title, description and headings."""
    document = extract(body, content_type, mode, deadline_s=EXTRACT_DEADLINE, base_url=base_url)
    title = sanitize(document.title).text if document.title else None
    description = sanitize(document.description).text if document.description else None
    headings = tuple(
        (level, sanitize(text).text) for level, text in document.headings[:MAX_HEADINGS]
    )
    clean = sanitize(document.text, utf8=document.utf8)
    data = clean.utf8 if clean.utf8 is not None else clean.text.encode()
    # A raw UTF-8 page the sanitiser left alone is the body itself, already hashed.
    same_as_body = data is body and bool(body_sha256)
    text_sha256 = body_sha256 if same_as_body else hashlib.sha256(data).hexdigest()
    return Prepared(
        document.mode,
        Sanitized(clean.text, clean.marker_lookalikes, clean.invisible_chars),
        text_sha256,
        title,
        description,
        headings,
        extraction_summary(document),
    )


class ExtractionPoolError(Exception):
    """A worker died or overran its hard timeout; the pool was replaced."""


class ExtractionPool:
    """`prepare` in worker processes, one per core (up to MAX_WORKERS), started on first use."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or max(1, min(os.cpu_count() or 1, MAX_WORKERS))
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker,
            initargs=(os.getpid(),),
        )

    async def prepare(
        self,
        body: bytes,
        content_type: str,
        mode: str,
        body_sha256: str = "",
        base_url: str | None = None,
    ) -> Prepared:
        executor = self._executor
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(
                executor, prepare, body, content_type, mode, body_sha256, base_url
            )
            return await asyncio.wait_for(future, EXTRACT_DEADLINE + HARD_TIMEOUT_GRACE)
        except (BrokenProcessPool, TimeoutError) as exc:
            self._replace(executor)
            raise ExtractionPoolError(
                "the extraction worker overran its deadline"
                if isinstance(exc, TimeoutError)
                else "the extraction worker stopped (out of memory?)"
            ) from None

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """A fresh pool for the next calls; the old one's processes are ended."""
        if self._executor is broken:
            self._executor = self._new_executor()
        processes = list(getattr(broken, "_processes", {}).values())
        broken.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _start_worker(parent_pid: int) -> None:
    """A worker's set-up: its memory cap, and the watchdog that ends it with its parent."""
    _limit_worker()
    threading.Thread(
        target=_exit_with_parent, args=(parent_pid,), name="parent-watchdog", daemon=True
    ).start()


def _exit_with_parent(parent_pid: int) -> None:
    """Return only by ending the process, once the gateway that started it is gone: a
    worker that outlives it holds memory and a core for nobody. Not PR_SET_PDEATHSIG: that
    fires when the spawning *thread* ends, and pool workers are spawned by whichever thread
    submits first."""
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        wait_for_ready([parent.sentinel])
    else:
        while os.getppid() == parent_pid:
            threading.Event().wait(PARENT_POLL_SECONDS)
    os._exit(0)


def _limit_worker() -> None:
    """Cap a worker's address space (a hostile page costs a failed call, not the host)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > WORKER_MEMORY_BYTES:
        limit = WORKER_MEMORY_BYTES
        if hard != resource.RLIM_INFINITY:
            limit = min(hard, limit)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
