"""Waiting for a rate-limit permit: acquire(wait=...) sleeps once, until the permit it reserved, or
gives up at once when that comes too late; waiting callers reserve permits in turn; aacquire waits
without blocking the event loop."""

import asyncio
import datetime as dt
import threading
import time

import pytest
import time_machine

from django_jobq import autocommit, ratelimit
from django_jobq.ratelimit import SlidingWindow, TokenBucket
from tests.ratelimits import SLOW, T0, fresh

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db]


@pytest.fixture
def sleeps(monkeypatch):
    """The durations acquire(wait=...) sleeps, slept for real."""
    slept: list[float] = []
    real_sleep = ratelimit.time.sleep
    monkeypatch.setattr(ratelimit.time, "sleep", lambda s: (slept.append(s), real_sleep(s)))
    return slept


def test_acquire_with_wait_returns_true_after_one_sleep_until_the_refill(python_clock, monkeypatch):
    slept: list[float] = []
    with time_machine.travel(T0, tick=False) as clock:  # the clock moves only by what acquire sleeps
        monkeypatch.setattr(ratelimit.time, "sleep", lambda s: (slept.append(s), clock.shift(s)))
        bucket = TokenBucket(fresh("wait"), rate=20, per=1, burst=1)
        assert [bucket.acquire(), bucket.acquire()] == [True, False]
        assert bucket.acquire(wait=0.5) is True
        assert len(slept) == 1 and 0 < slept[0] <= 1 / 20  # as long as the database said, once
        window = SlidingWindow(fresh("wait"), limit=2, window=0.1)
        assert [window.acquire(2), window.acquire(wait=0.5)] == [True, True]
        assert len(slept) == 2 and 0 < slept[1] <= 0.1


def test_acquire_with_wait_gives_up_at_once_when_the_permit_comes_too_late(sleeps):
    bucket = TokenBucket(fresh("late"), rate=1, per=SLOW, burst=1)
    assert [bucket.acquire(), bucket.acquire(wait=0.3)] == [True, False]
    window = SlidingWindow(fresh("late"), limit=1, window=SLOW)
    assert [window.acquire(), window.acquire(wait=dt.timedelta(seconds=0.3))] == [True, False]
    assert sleeps == []


def test_waiting_callers_reserve_permits_in_turn_and_others_cannot_take_them(python_clock, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(ratelimit.time, "sleep", slept.append)  # the clock stands still: no real sleep
    with time_machine.travel(T0, tick=False) as clock:
        bucket = TokenBucket(fresh("reserve"), rate=1, per=10, burst=1)
        window = SlidingWindow(fresh("reserve"), limit=2, window=10)
        assert bucket.acquire() and window.acquire(2)  # t=0: both empty
        assert [bucket.acquire(wait=25), bucket.acquire(wait=25), bucket.acquire(wait=25)] == [
            True,
            True,
            False,
        ]
        assert [window.acquire(wait=15), window.acquire(wait=15), window.acquire(wait=15)] == [
            True,
            True,
            False,
        ]
        assert slept == [10.0, 20.0, 10.0, 10.0]  # the bucket's t=10 and t=20, the window's t=10 twice
        clock.shift(15)
        assert [bucket.acquire(), window.acquire()] == [False, False]  # t=15: spent by the reservations
        clock.shift(15)
        assert [bucket.acquire(), bucket.acquire()] == [True, False]  # t=30
        assert [window.acquire(2), window.acquire()] == [True, False]  # t=30: those of t=10 left


def test_many_waiting_threads_each_make_one_statement_and_all_get_a_permit(monkeypatch):
    monkeypatch.setattr(autocommit, "POOL_SIZE", 16)
    bucket = TokenBucket(fresh("herd"), rate=50, per=1, burst=1)  # 10 permits take 0.2 s to come
    statements: list[int] = []
    reserve = bucket._reserve
    monkeypatch.setattr(bucket, "_reserve", lambda n, ahead: (statements.append(n), reserve(n, ahead))[1])
    barrier = threading.Barrier(10)
    granted: list[bool] = []
    granted_at: list[float] = []

    def call() -> None:
        barrier.wait()
        granted.append(bucket.acquire(wait=5))
        granted_at.append(time.monotonic())

    threads = [threading.Thread(target=call) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert granted == [True] * 10
    assert len(statements) == 10  # no polling: a waiter sleeps once, until its reserved permit
    # Nothing was handed out ahead of its refill: one permit in the bucket, nine more at 50 a second
    # take 0.18 s at least (a bound a slow machine can only exceed).
    assert max(granted_at) - min(granted_at) >= 9 / 50 - 0.02


def test_aacquire_takes_permits_and_waits_without_blocking_the_event_loop():
    bucket = TokenBucket(fresh("async"), rate=2, per=1, burst=1)  # the next permit comes 0.5 s later

    async def main() -> tuple[bool, bool, bool, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        tick = asyncio.create_task(ticker())
        started = time.monotonic()
        first, second = await bucket.aacquire(), await bucket.aacquire()
        second_after = time.monotonic() - started
        third = await bucket.aacquire(wait=5)
        tick.cancel()
        return first, second and second_after < 0.5, third, ticks

    first, granted_early, third, ticks = asyncio.run(main())
    # The second permit, asked for at once, is refused (unless a slow machine took the 0.5 s it needs
    # to refill); the third waits for it.
    assert (first, granted_early, third) == (True, False, True)
    assert ticks > 0  # the loop kept running while aacquire waited
