"""Per-client limits with an injected clock: the rolling window, bursts, Retry-After, and
the concurrency cap with idempotent release."""

from __future__ import annotations

import pytest

from gateway.config import ClientLimits
from gateway.errors import RateLimitedError
from gateway.limits import InMemoryLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_burst_of_n_passes_and_n_plus_one_waits_for_the_oldest() -> None:
    clock = Clock()
    limiter = InMemoryLimiter(clock=clock)
    limits = ClientLimits(requests_per_minute=3)
    for step in (0.0, 10.0, 20.0):
        clock.now = 1000.0 + step
        await (await limiter.acquire("a", limits)).release()
    with pytest.raises(RateLimitedError) as refused:
        await limiter.acquire("a", limits)
    assert refused.value.retry_after == pytest.approx(40.0)  # the first is 60 s old at 1060
    assert refused.value.http_status == 429 and refused.value.code == "rate_limited"
    clock.now = 1060.0
    await limiter.acquire("a", limits)  # the oldest left the window


@pytest.mark.parametrize(
    ("times", "admitted"),
    [
        ([0, 0, 0, 0], [True, True, True, False]),
        ([0, 59.9, 60.0, 60.1], [True, True, True, True]),
        ([0, 1, 2, 59, 61, 61.5], [True, True, True, False, True, True]),
    ],
    ids=["burst", "sliding", "mixed"],
)
async def test_rolling_window_table(times, admitted) -> None:
    clock = Clock()
    limiter = InMemoryLimiter(clock=clock)
    limits = ClientLimits(requests_per_minute=3)
    got = []
    for t in times:
        clock.now = 1000.0 + t
        try:
            await (await limiter.acquire("a", limits)).release()
            got.append(True)
        except RateLimitedError:
            got.append(False)
    assert got == admitted


async def test_clients_are_counted_separately() -> None:
    limiter = InMemoryLimiter(clock=Clock())
    limits = ClientLimits(requests_per_minute=1)
    await limiter.acquire("a", limits)
    await limiter.acquire("b", limits)
    with pytest.raises(RateLimitedError):
        await limiter.acquire("a", limits)


async def test_concurrency_cap_and_idempotent_release() -> None:
    limiter = InMemoryLimiter(clock=Clock())
    limits = ClientLimits(concurrent=2)
    first = await limiter.acquire("a", limits)
    second = await limiter.acquire("a", limits)
    with pytest.raises(RateLimitedError) as refused:
        await limiter.acquire("a", limits)
    assert refused.value.retry_after == 1.0
    await first.release()
    await first.release()  # a second release gives nothing back
    assert limiter.in_flight("a") == 1
    third = await limiter.acquire("a", limits)
    with pytest.raises(RateLimitedError):
        await limiter.acquire("a", limits)
    await second.release()
    await third.release()
    assert limiter.in_flight("a") == 0


async def test_no_limits_means_no_bookkeeping() -> None:
    limiter = InMemoryLimiter(clock=Clock())
    for _ in range(1000):
        await (await limiter.acquire("a", ClientLimits())).release()
    assert limiter.in_flight("a") == 0


async def test_a_refused_request_does_not_count() -> None:
    clock = Clock()
    limiter = InMemoryLimiter(clock=clock)
    limits = ClientLimits(requests_per_minute=1)
    await limiter.acquire("a", limits)
    for _ in range(5):
        with pytest.raises(RateLimitedError):
            await limiter.acquire("a", limits)
    clock.now += 60.0
    await limiter.acquire("a", limits)
