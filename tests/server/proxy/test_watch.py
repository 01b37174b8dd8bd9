"""The idle watch of a connection's requests: it cancels the request it watches once nothing
has come for `idle` seconds, and re-arms its one timer when activity came in between."""

from __future__ import annotations

import asyncio

from gateway.server.proxy.watch import IdleWatch


async def test_a_request_with_nothing_coming_is_cancelled() -> None:
    loop = asyncio.get_running_loop()
    watch = IdleWatch(loop, 0.05)

    async def request() -> None:
        watch.start()
        await asyncio.Event().wait()  # an upstream that never sends

    task = loop.create_task(request())
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done and task.cancelled() and watch.fired
    watch.close()
    assert watch.timer is None


async def test_activity_re_arms_the_timer_and_a_stopped_watch_cancels_nothing() -> None:
    loop = asyncio.get_running_loop()
    watch = IdleWatch(loop, 60)
    watch.start()  # watches this very task
    first = watch.timer
    watch.touch()
    watch._check()  # the timer fired early (activity since): it re-arms, nothing cancelled
    assert not watch.fired and watch.timer is not None and watch.timer is not first
    watch.stop()
    watch.last -= 120  # long idle, but nothing is watched any more
    watch._check()
    assert not watch.fired and watch.task is None
    watch.close()
    assert watch.timer is None
