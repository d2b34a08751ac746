"""Helpers for the rate-limit tests: fresh keys (every limiter commits on its own connection, outside
the test's transaction) and limiters that do not refill while a test runs."""

import datetime as dt
import uuid

from django_jobq.ratelimit import SlidingWindow, TokenBucket

T0 = dt.datetime(2026, 4, 1, 9, 0, tzinfo=dt.UTC)
SLOW = 3600  # seconds per token: nothing refills while a test runs


def fresh(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex}"


def limiter(kind: str, key: str, limit: int) -> TokenBucket | SlidingWindow:
    if kind == "bucket":
        return TokenBucket(key, rate=1, per=SLOW, burst=limit)
    return SlidingWindow(key, limit=limit, window=SLOW)
