"""The database's unavailability as one worker sees it, logged so an operator can read it: the first
failure at once, then a summary at most every SUMMARY_SECONDS (however many threads keep failing),
and the recovery once, with how long it lasted and how many attempts failed."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("django_jobq")
SUMMARY_SECONDS = 30.0


class Outage:
    def __init__(self, worker_id: str, clock: Callable[[], float] = time.monotonic):
        self.worker_id = worker_id
        self.clock = clock
        self._lock = threading.Lock()
        self.started: float | None = None  # monotonic time of the first failure; None: no outage
        self.failures = 0
        self._summarised = 0.0

    def failed(self, what: str, exc: BaseException) -> None:
        """A connection error of ``what`` (a heartbeat, a claim, a write)."""
        now = self.clock()
        with self._lock:
            if self.started is None:
                self.started, self.failures, self._summarised = now, 1, now
                logger.warning(
                    "worker %s: the database is unreachable (%s: %s); retrying, further errors are "
                    "summarised every %.0fs", self.worker_id, what, _line(exc), SUMMARY_SECONDS,
                )  # fmt: skip
                return
            self.failures += 1
            if now - self._summarised >= SUMMARY_SECONDS:
                self._summarised = now
                logger.warning(
                    "worker %s: the database is still unreachable after %.0fs (%d failed attempts; "
                    "latest, %s: %s)", self.worker_id, now - self.started, self.failures, what, _line(exc),
                )  # fmt: skip

    def ok(self) -> None:
        """A statement went through: the end of an outage, if there was one."""
        if self.started is None:  # the usual case, without taking the lock
            return
        with self._lock:
            if self.started is None:
                return
            lasted, failures = self.clock() - self.started, self.failures
            self.started, self.failures = None, 0
        logger.warning(
            "worker %s: the database is reachable again after %.1fs (%d failed attempts)",
            self.worker_id, lasted, failures,
        )  # fmt: skip


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
