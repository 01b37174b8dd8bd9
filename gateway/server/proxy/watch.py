"""The idle watch of a connection's plain-HTTP requests: one timer per connection that cancels
a request whose upstream has sent nothing for `proxy.tunnel_idle_timeout`."""

from __future__ import annotations

import asyncio
from typing import Any


class IdleWatch:
    """Cancels a request's task once nothing has come from the upstream for `idle` seconds.
    Activity only stamps `last`. One per connection, reused by its requests: its one timer
    re-arms itself when it fires early, where a per-read timeout makes a timer per chunk."""

    __slots__ = ("loop", "idle", "task", "last", "timer", "fired", "streaming")

    def __init__(self, loop: asyncio.AbstractEventLoop, idle: float) -> None:
        self.loop = loop
        self.idle = idle
        self.task: asyncio.Task[Any] | None = None  # the request watched; None between them
        self.last = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.fired = False
        self.streaming = False  # the response head went out

    def start(self) -> None:
        self.task = asyncio.current_task(self.loop)  # given the loop: no getpid(2)
        self.last = self.loop.time()
        self.fired = self.streaming = False
        if self.timer is None:
            self.timer = self.loop.call_at(self.last + self.idle, self._check)

    def touch(self) -> None:
        self.last = self.loop.time()

    def stop(self) -> None:
        self.task = None  # the timer stays; it finds nothing to watch and lapses

    def close(self) -> None:
        self.task = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _check(self) -> None:
        self.timer = None
        task = self.task
        if task is None or task.done():
            return
        due = self.last + self.idle
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._check)
            return
        self.fired = True
        task.cancel()
