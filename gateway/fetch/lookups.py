"""System DNS lookups in threads of their own, one per name in flight, a bounded number.

`getaddrinfo` blocks its thread until the system resolver answers or gives up, and giving up
on a name whose servers never answer takes seconds (glibc: `timeout` x `attempts` x
nameservers), long after the gateway itself stopped waiting. Run in the event loop's default
executor (a handful of threads on a small machine), a few such names asked at once would hold
every thread, and every other lookup, policy reload, review page and passage ranking would
queue behind them: one agent asking for names under a silent domain would stall everyone.
So lookups get threads of their own; two waiters for one name share one lookup; and when
every thread is held, a new name is refused at once, with that reason, rather than queued
behind answers that may never come (fail closed: the request is refused, not let through).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

LOOKUP_THREADS = 64  # names looked up at once, per process (a blocked thread costs little)

AddrInfo = list[tuple[Any, ...]]
Resolve = Callable[[str], AddrInfo]


def system_getaddrinfo(name: str) -> AddrInfo:
    return socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)


class LookupsBusyError(OSError):
    """Every lookup thread is waiting on an answer; this name was not asked."""


class SystemLookups:
    def __init__(self, resolve: Resolve = system_getaddrinfo, threads: int = LOOKUP_THREADS):
        self._resolve = resolve
        self._threads = threads
        self._lock = threading.Lock()
        self._in_flight: dict[str, Future[AddrInfo]] = {}
        self._executor: ThreadPoolExecutor | None = None  # made on first use (after any fork)

    @property
    def busy(self) -> int:
        """Lookups whose thread has not returned yet (waited for or given up on)."""
        with self._lock:
            return len(self._in_flight)

    async def getaddrinfo(self, name: str) -> AddrInfo:
        """The system resolver's answer for `name`; cancelling the wait leaves the lookup
        running for any other waiter (and its thread counted until it returns)."""
        lookup = asyncio.wrap_future(self._start(name))
        # A waiter that gave up leaves this future behind: read its outcome, so a failure
        # nobody awaits any more is not logged as an exception never retrieved.
        lookup.add_done_callback(_read_outcome)
        return await asyncio.shield(lookup)

    def _start(self, name: str) -> Future[AddrInfo]:
        with self._lock:
            running = self._in_flight.get(name)
            if running is not None:
                return running
            if len(self._in_flight) >= self._threads:
                raise LookupsBusyError(
                    f"all {self._threads} DNS lookup threads are waiting on answers "
                    "(names whose servers are slow or silent); not looked up"
                )
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="dns")
            future = self._executor.submit(self._resolve, name)
            self._in_flight[name] = future
        future.add_done_callback(lambda _: self._finished(name, future))
        return future

    def _finished(self, name: str, future: Future[AddrInfo]) -> None:
        with self._lock:
            if self._in_flight.get(name) is future:
                del self._in_flight[name]

    def after_fork(self) -> None:
        """In a forked child the pool's threads do not exist: start again with none, or its
        lookups would wait for threads that will never take them."""
        self._lock = threading.Lock()
        self._in_flight = {}
        self._executor = None


def _read_outcome(future: asyncio.Future[AddrInfo]) -> None:
    if not future.cancelled():
        future.exception()


SYSTEM_LOOKUPS = SystemLookups()
os.register_at_fork(after_in_child=SYSTEM_LOOKUPS.after_fork)
