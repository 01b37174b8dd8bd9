"""System lookups in threads of their own: a name whose answer never comes holds one of them,
never the loop's default executor; one name asked twice is looked up once; all threads held
refuses a new name at once. The lookup function is a real blocking call (a thread waiting on
an event, as getaddrinfo waits on a silent server), so threads are really held."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import socket
import threading
from collections import Counter

import pytest

from gateway.fetch.lookups import SYSTEM_LOOKUPS, AddrInfo, LookupsBusyError, SystemLookups


class BlockingResolver:
    """Answers 127.0.0.1 for every name; names under `hang` wait until `release` is set."""

    def __init__(self, hang: str = "silent.test.") -> None:
        self.hang = hang
        self.release = threading.Event()
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, name: str) -> AddrInfo:
        with self.lock:
            self.calls[name] += 1
        if name.endswith(self.hang):
            self.release.wait(30)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0))]


async def test_a_silent_name_holds_only_the_lookup_threads() -> None:
    resolver = BlockingResolver()
    lookups = SystemLookups(resolver, threads=16)
    # More names than the default executor has threads on any machine this runs on.
    stuck = [asyncio.ensure_future(lookups.getaddrinfo(f"n{i}.silent.test.")) for i in range(12)]
    try:
        answer = await lookups.getaddrinfo("good.test.")
        assert answer[0][4][0] == "127.0.0.1"
        # The default executor (reloads, the review page, ranking) is untouched.
        assert await asyncio.to_thread(lambda: "ran") == "ran"
        assert not any(task.done() for task in stuck)
        assert lookups.busy == 12
    finally:
        resolver.release.set()
        await asyncio.gather(*stuck)
    assert lookups.busy == 0


async def test_one_name_asked_at_once_is_looked_up_once() -> None:
    resolver = BlockingResolver()
    lookups = SystemLookups(resolver, threads=4)
    waiters = [asyncio.ensure_future(lookups.getaddrinfo("a.silent.test.")) for _ in range(10)]
    await asyncio.sleep(0)
    assert lookups.busy == 1
    resolver.release.set()
    answers = await asyncio.gather(*waiters)
    assert all(answer == answers[0] for answer in answers)
    assert resolver.calls["a.silent.test."] == 1


async def test_a_waiter_giving_up_leaves_the_lookup_to_the_others() -> None:
    resolver = BlockingResolver()
    lookups = SystemLookups(resolver, threads=4)
    patient = asyncio.ensure_future(lookups.getaddrinfo("b.silent.test."))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(lookups.getaddrinfo("b.silent.test."), 0.01)
    assert not patient.done()
    assert lookups.busy == 1  # the thread is still held until the system resolver returns
    resolver.release.set()
    assert (await patient)[0][4][0] == "127.0.0.1"
    assert lookups.busy == 0


async def test_every_thread_held_refuses_a_new_name_with_its_reason() -> None:
    resolver = BlockingResolver()
    lookups = SystemLookups(resolver, threads=3)
    stuck = [asyncio.ensure_future(lookups.getaddrinfo(f"n{i}.silent.test.")) for i in range(3)]
    await asyncio.sleep(0)
    try:
        with pytest.raises(LookupsBusyError, match="all 3 DNS lookup threads are waiting"):
            await lookups.getaddrinfo("good.test.")
        assert "good.test." not in resolver.calls
        # A name already being looked up is still shared, not refused.
        shared = asyncio.ensure_future(lookups.getaddrinfo("n0.silent.test."))
    finally:
        resolver.release.set()
        await asyncio.gather(*stuck)
    await shared
    # Once the threads return, new names are looked up again.
    assert (await lookups.getaddrinfo("good.test."))[0][4][0] == "127.0.0.1"


async def test_a_failed_lookup_is_raised_to_every_waiter_and_frees_its_thread() -> None:
    def fail(name: str) -> AddrInfo:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    lookups = SystemLookups(fail, threads=2)
    results = await asyncio.gather(
        lookups.getaddrinfo("x.test."), lookups.getaddrinfo("x.test."), return_exceptions=True
    )
    assert all(isinstance(result, socket.gaierror) for result in results)
    assert lookups.busy == 0


def _look_up_localhost_literal(answers: multiprocessing.Queue) -> None:
    answers.put(asyncio.run(SYSTEM_LOOKUPS.getaddrinfo("127.0.0.1"))[0][4][0])


async def test_a_forked_child_looks_up_with_threads_of_its_own() -> None:
    """The parent's pool has threads (and a lookup held in one); a forked child's lookup must
    not wait for threads that do not exist in it."""
    assert (await SYSTEM_LOOKUPS.getaddrinfo("127.0.0.1"))[0][4][0] == "127.0.0.1"
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=_look_up_localhost_literal, args=(answers,), daemon=True)
    child.start()
    try:
        assert await asyncio.to_thread(answers.get, True, 20) == "127.0.0.1"
    finally:
        await asyncio.to_thread(child.join, 5)
        if child.is_alive():  # its lookup never ran: end it, the test has failed
            child.kill()
            await asyncio.to_thread(child.join, 5)
    assert child.exitcode == 0


async def test_a_failure_nobody_waits_for_any_more_is_not_logged_as_unretrieved() -> None:
    release = threading.Event()

    def fail_later(name: str) -> AddrInfo:
        release.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    loop = asyncio.get_running_loop()
    unhandled: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: unhandled.append(context))
    try:
        lookups = SystemLookups(fail_later, threads=2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(lookups.getaddrinfo("gone.test."), 0.01)
        release.set()
        while lookups.busy:  # the thread returns with its failure
            await asyncio.sleep(0.01)
        for _ in range(3):  # the failure reaches the asyncio future left behind
            await asyncio.sleep(0)
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert unhandled == []
