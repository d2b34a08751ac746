"""Paused queues, as the worker knows them: read from the database at most once per poll interval and
again as soon as a pause or resume notifies the worker; a lane leaves the paused queues out of its
claims (a named lane of a paused queue claims nothing and only writes its outcomes)."""

from __future__ import annotations

import logging
import threading
import time

from django.db import Error as DatabaseError
from django.db import connections

from ..conf import jobq_settings
from ..models import Job
from .base import WorkerBase
from .lanes import Lane

logger = logging.getLogger("django_jobq")

RETRY_SECONDS = 1.0  # after a failed read, the next one is tried this soon (or at the poll, if sooner)


class PauseMixin(WorkerBase):
    """``paused`` is the last set read; ``_paused_lock`` serialises the reads (a dispatcher that finds a
    read under way waits for its result rather than claim with the old set); ``_paused_stale`` is set
    by a notification (or a LISTEN reconnect) and makes the next cycle read again."""

    paused: frozenset[str]
    _paused_lock: threading.Lock
    _paused_stale: threading.Event
    _paused_next: float  # monotonic time of the next scheduled read

    def _held(self, lane: Lane) -> tuple[str, ...]:
        """The paused queues ``lane`` must leave out of its next claim: its own queue, for a named lane
        (which then claims nothing), or those of the "*" lane's queues that are paused."""
        paused = self._paused_now()
        if lane.claims is not None:
            held: tuple[str, ...] = (lane.queue,) if lane.queue in paused else ()
        else:
            held = tuple(sorted(paused.difference(lane.exclude)))
        lane.held = held
        return held

    def _paused_now(self) -> frozenset[str]:
        """The paused queues, read again if the last read is a poll interval old or a notification
        came since. A failed read keeps the last known set (and is tried again within a second)."""
        with self._paused_lock:
            now = time.monotonic()
            if not self._paused_stale.is_set() and now < self._paused_next:
                return self.paused
            self._paused_stale.clear()  # before the read: a notification during it calls for another
            try:
                Job.objects.bound_statements()
                fresh = frozenset(Job.objects.paused_queues())
            except DatabaseError as exc:
                connections[jobq_settings().database].close()
                self._paused_next = now + min(self.poll_interval, RETRY_SECONDS)
                logger.warning(
                    "worker %s: could not read the paused queues (%s); keeping %s",
                    self.worker_id, exc, sorted(self.paused) or "none",
                )  # fmt: skip
                return self.paused
            self._paused_next = now + self.poll_interval
            old, self.paused = self.paused, fresh
        if fresh != old:
            logger.info("worker %s: paused queues now %s", self.worker_id, sorted(fresh) or "none")
            self._wake_all()  # a lane that went idle with the old set claims again at once
        return fresh

    def _state_changed(self) -> None:
        """A queue was paused or resumed (or notifications may have been missed): read again, now."""
        self._paused_stale.set()
        self._wake_all()
