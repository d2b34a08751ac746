"""Rate limits held in PostgreSQL, per key, shared by every process and host: TokenBucket and
SlidingWindow. One statement decides each permit (django_jobq.sql.postgres.ratelimit says why N parallel
acquires never pass more than the limit) and commits on its own connection (django_jobq.autocommit),
so a permit stays spent even if the caller's transaction rolls back, and no caller's transaction ever
holds a key's row lock. When the database cannot be reached an acquire raises RateLimitUnavailable
(fail closed), or returns True and logs a warning when the limiter was built with ``fail_open=True``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from . import autocommit, validation
from .conf import home_database, jobq_settings
from .exceptions import ConfigurationError, InvalidJob, RateLimitUnavailable
from .sql import engine_for
from .sql.postgres import ratelimit as sql
from .validation import parse_rate  # documented as django_jobq.ratelimit.parse_rate

__all__ = ["SlidingWindow", "TokenBucket", "parse_rate", "prune"]

logger = logging.getLogger("django_jobq")

MAX_KEY_LENGTH = 500  # characters; at most 2,000 bytes of UTF-8, well inside a btree entry
MAX_COUNT = validation.MAX_RATE_COUNT  # rate, burst
MAX_WINDOW_LIMIT = 10_000  # a window's log holds one stamp per live permit, rewritten by every grant
MIN_SECONDS = validation.MIN_RATE_SECONDS  # per, window: the clock counts microseconds


class _Limiter:
    """What both primitives share: the key, the failure policy, and the acquire loop."""

    _sql: str  # the acquire statement: a row (seconds until the permits are there) if granted
    _most: int  # the most permits one acquire may ask for

    def __init__(self, key: Any, *, fail_open: bool, using: str | None) -> None:
        self.key = validation.string(key, "key", MAX_KEY_LENGTH)
        if not isinstance(fail_open, bool):
            raise InvalidJob(f"fail_open must be True or False, not {fail_open!r}")
        self.fail_open, self.using = fail_open, _alias(using)

    def acquire(self, n: int = 1, *, wait: float = 0) -> bool:
        """Take ``n`` permits; True if taken. With ``wait``, permits that come within ``wait`` seconds
        are reserved, and acquire sleeps until they are there (once: the database says how long);
        False at once if they would come later than that. A reservation is spent even if the caller
        is interrupted while it sleeps."""
        n, wait = self._request(n, wait)
        delay = self._reserve(n, wait)
        if delay is None:
            return False
        if delay > 0:
            time.sleep(delay)
        return True

    async def aacquire(self, n: int = 1, *, wait: float = 0) -> bool:
        """acquire for async code: the statement in a worker thread, then asyncio.sleep."""
        n, wait = self._request(n, wait)
        delay = await sync_to_async(self._reserve, thread_sensitive=False)(n, wait)
        if delay is None:
            return False
        if delay > 0:
            await asyncio.sleep(delay)
        return True

    def _request(self, n: Any, wait: Any) -> tuple[int, float]:
        return validation.integer(n, "n", 1, self._most), validation.seconds(wait, "wait")

    def _params(self, n: int) -> dict[str, Any]:
        raise NotImplementedError

    def _reserve(self, n: int, ahead: float) -> float | None:
        """Seconds until the ``n`` permits granted are there (0: now), or None when refused."""
        row = self._execute(self._sql, {**self._params(n), "ahead": ahead}, passed=(0.0,))
        return None if row is None else float(row[0])

    def _execute(
        self, statement: str, params: dict[str, Any], passed: tuple[Any, ...]
    ) -> tuple[Any, ...] | None:
        """The statement's first row (None: no row) on the limiter's own connection, at the clock;
        ``passed`` when the database is away and the limiter fails open."""
        params["now"] = timezone.now() if jobq_settings().clock == "python" else None
        prepare = bool(jobq_settings().prepared_statements)
        try:
            # on the home database whatever the context: one bucket for workers of every shard
            with autocommit.pool(self.using or home_database()).connection() as conn:
                row: tuple[Any, ...] | None = conn.execute(statement, params, prepare=prepare).fetchone()
        except psycopg.OperationalError as exc:
            if not self.fail_open:
                raise RateLimitUnavailable(f"rate limit {self.key!r}: database unavailable: {exc}") from exc
            logger.warning("rate limit %r: database unavailable (%s); fail_open: passed", self.key, exc)
            return passed
        return row


class TokenBucket(_Limiter):
    """``rate`` tokens every ``per`` seconds, at most ``burst`` held; a new bucket starts full. Over any
    interval of t seconds a key grants at most ``burst + rate * t / per`` permits."""

    _sql = sql.BUCKET_ACQUIRE

    def __init__(
        self,
        key: str,
        rate: int,
        per: float,
        burst: int,
        *,
        fail_open: bool = False,
        using: str | None = None,
    ) -> None:
        super().__init__(key, fail_open=fail_open, using=using)
        self.rate = validation.integer(rate, "rate", 1, MAX_COUNT)
        self.per = _duration(per, "per")
        self.burst = self._most = validation.integer(burst, "burst", 1, MAX_COUNT)
        if self.burst * self.per / self.rate > validation.MAX_SECONDS:
            raise InvalidJob(f"an empty bucket must refill within {validation.MAX_SECONDS} seconds")

    def _params(self, n: int) -> dict[str, Any]:
        return {"key": self.key, "n": n, "burst": self.burst, "fill": self.rate / self.per}

    def take(self, most: int) -> tuple[int, float]:
        """Take up to ``most`` permits, as many as the bucket holds now (none is lent or waited for):
        (permits taken, seconds until the bucket next holds one; 0: it does). Failing open, ``most``
        are passed."""
        most = validation.integer(most, "most", 1, MAX_COUNT)
        row = self._execute(sql.BUCKET_TAKE, self._params(most), passed=(most, float(self.burst)))
        if row is None:  # a first use of the key raced another one's: ask again
            return 0, 0.0
        granted, tokens = int(row[0]), float(row[1])
        return granted, max(0.0, (1 - tokens) * self.per / self.rate)

    def give_back(self, n: int) -> None:
        """Put back ``n`` permits taken and never used (the bucket never holds more than ``burst``)."""
        n = validation.integer(n, "n", 1, MAX_COUNT)
        self._execute(sql.BUCKET_GIVE_BACK, self._params(n), passed=())

    def __repr__(self) -> str:
        return f"TokenBucket({self.key!r}, rate={self.rate}, per={self.per:g}, burst={self.burst})"


class SlidingWindow(_Limiter):
    """At most ``limit`` permits in any ``window`` seconds (a true sliding window: the log of the live
    permits' times, kept in the key's row)."""

    _sql = sql.WINDOW_ACQUIRE

    def __init__(
        self, key: str, limit: int, window: float, *, fail_open: bool = False, using: str | None = None
    ) -> None:
        super().__init__(key, fail_open=fail_open, using=using)
        self.limit = self._most = validation.integer(limit, "limit", 1, MAX_WINDOW_LIMIT)
        self.window = _duration(window, "window")

    def _params(self, n: int) -> dict[str, Any]:
        return {"key": self.key, "n": n, "limit": self.limit, "window_us": round(self.window * 1_000_000)}

    def __repr__(self) -> str:
        return f"SlidingWindow({self.key!r}, limit={self.limit}, window={self.window:g})"


def _alias(using: Any) -> str | None:
    """A database alias, or None for JOBQ["DATABASE"] (read at each call, not at import)."""
    if using is not None and (not isinstance(using, str) or using not in settings.DATABASES):
        raise ConfigurationError(f"using must name a database of settings.DATABASES, not {using!r}")
    return using


def _duration(value: Any, what: str) -> float:
    seconds = validation.seconds(value, what)
    if seconds < MIN_SECONDS:
        raise InvalidJob(f"{what} must be at least {MIN_SECONDS} seconds, not {value!r}")
    return seconds


def prune(*, using: str | None = None, batch: int = 5000) -> int:
    """Delete the rows of keys at rest (full buckets, windows with no live permit); how many went.
    Safe at any time: a pruned key behaves as it would have with its row."""
    batch = validation.integer(batch, "batch", 1, 1_000_000)
    alias = _alias(using) or jobq_settings().database
    if not engine_for(alias).capabilities.rate_limits:
        return 0  # no rate-limit row is ever written on such an engine (acquire refuses)
    now = timezone.now() if jobq_settings().clock == "python" else None
    deleted = 0
    with autocommit.pool(alias).connection() as conn:
        for statement in (sql.PRUNE_BUCKETS, sql.PRUNE_WINDOWS):
            while True:
                count = conn.execute(statement, {"batch": batch, "now": now}).rowcount
                deleted += count
                if count < batch:
                    break
    return deleted
