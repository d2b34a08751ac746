"""The reaper: returns expired leases to the queue and prunes old finished jobs. One acts at a time
across all replicas (a PostgreSQL advisory lock held by a session); the others stand by."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import Error as DatabaseError
from django.db import connections

from .conf import jobq_settings
from .listener import connection_params
from .models import Job, JobStatus

logger = logging.getLogger("django_jobq")

# pg_try_advisory_lock key: the bytes "jobqreap" read as a 64-bit integer.
LOCK_KEY = int.from_bytes(b"jobqreap", "big", signed=True)
MAX_PRUNE_BATCHES = 100  # per pass and status, so one pass never runs unbounded
WORKER_RECORD_RETENTION = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class PassResult:
    reaped: list[int]
    pruned_done: int
    pruned_dead: int


class Reaper:
    def __init__(self, *, interval: float | None = None):
        self.interval = jobq_settings().reap_interval if interval is None else interval
        self._lock_conn: psycopg.Connection[Any] | None = None
        self.is_leader = threading.Event()

    # -- leadership ------------------------------------------------------------------------------------
    def acquire(self) -> bool:
        """Become the acting reaper if no other holds the lock; True while we hold it."""
        if self._lock_conn is not None:
            try:
                self._lock_conn.execute("SELECT 1")  # a dead session has lost the lock
                return True
            except psycopg.Error:
                self.release()
        conn = psycopg.connect(**connection_params(jobq_settings().database), autocommit=True)
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
        if row and row[0]:
            self._lock_conn = conn
            self.is_leader.set()
            logger.info("reaper: acting (holds the advisory lock)")
            return True
        conn.close()
        return False

    def release(self) -> None:
        self.is_leader.clear()
        if self._lock_conn is not None:
            try:
                self._lock_conn.close()  # ending the session releases the advisory lock
            finally:
                self._lock_conn = None

    # -- work ------------------------------------------------------------------------------------------
    def run_once(self) -> PassResult:
        """One pass: reap every expired lease, then prune in bounded batches. Call while holding the lock."""
        conf = jobq_settings()
        reaped = Job.objects.reap()
        if reaped:
            logger.warning("reaper: returned %d job(s) with expired leases: %s", len(reaped), reaped[:50])
        pruned = {
            status: self._prune(status, retention, conf.prune_batch)
            for status, retention in (
                (JobStatus.DONE, conf.done_retention_seconds),
                (JobStatus.DEAD, conf.dead_retention_seconds),
            )
        }
        Job.objects.prune_workers(WORKER_RECORD_RETENTION)
        return PassResult(reaped, pruned[JobStatus.DONE], pruned[JobStatus.DEAD])

    @staticmethod
    def _prune(status: JobStatus, retention: float, batch: int) -> int:
        total = 0
        for _ in range(MAX_PRUNE_BATCHES):
            deleted = Job.objects.prune(status, retention, batch)
            total += deleted
            if deleted < batch:
                break
        return total

    def run(self, stopping: threading.Event) -> None:
        """Act whenever this process holds the lock; stand by otherwise. Until ``stopping`` is set."""
        try:
            while not stopping.is_set():
                try:
                    if self.acquire():
                        self.run_once()
                except (DatabaseError, psycopg.Error) as exc:
                    logger.warning("reaper: database error (%s); retrying", exc)
                    connections[jobq_settings().database].close()
                    self.release()
                stopping.wait(self.interval)
        finally:
            self.release()
