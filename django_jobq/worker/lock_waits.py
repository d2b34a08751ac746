"""Writes about a held job that meet its row locked by another transaction.

The lane's cycle and the heartbeat never wait for a locked row: they skip it (SKIP LOCKED) and call it
busy, so that one held row delays nothing else. Most such locks are brief (another worker's claim that
read the row just as this worker took it holds it until that claim commits, a millisecond or so), so
the write is tried again at once, waiting at most BRIEF_WAIT_SECONDS for the row. A row still held
then (an application's transaction that locked the job's row, for a cancel or a wait_for() mark, and
stays open) gets a thread and a connection of its own, one per job, that waits for it with no lock or
statement timeout. A write waiting in a row's lock queue is granted the row as its holder ends, before
any reaper pass can take it (the reaper skips locked rows, and a waiting writer holds the row's place),
so a job whose lease ran out while another transaction held its row is renewed or finished by its own
worker, never reaped from under a run that goes on.

Each write runs in a transaction after the row's lock is granted (Job.objects.lock_job), so its clock,
a renewed lease's start included, is read after the wait. Timeouts are set for that transaction only
(SET LOCAL), which holds behind a transaction-mode pooler too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import Error as DatabaseError
from django.db import connections, transaction

from ..conf import jobq_settings
from ..database_context import carrying_database
from ..models import Job

logger = logging.getLogger("django_jobq")

BRIEF_WAIT_SECONDS = 0.05  # how long the first try waits for the row before a thread waits for it


def _lock_refused(exc: BaseException) -> bool:
    return isinstance(exc.__cause__, psycopg.errors.LockNotAvailable)


def locked_write(job_id: int, write: Callable[[], Any], wait_seconds: float) -> Any:
    """``write()`` in a transaction, after the job's row lock, waiting at most ``wait_seconds`` for it
    (0: as long as it takes); DatabaseError (LockNotAvailable) when the wait ran out."""
    with transaction.atomic(using=jobq_settings().database):
        Job.objects.local_timeouts(wait_seconds)
        Job.objects.lock_job(job_id)
        return write()


class LockWaits:
    """At most one waiting write per job and kind of write (a completion, a renewal)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._lock = threading.Lock()
        self._waiting: dict[tuple[int, str], Any] = {}  # -> the waiting thread's psycopg connection
        self._closed = False

    def write(
        self, job_id: int, kind: str, write: Callable[[], Any], then: Callable[[Any], None], what: str
    ) -> None:
        """Make ``write`` (a write about job ``job_id`` whose row was found held) and call ``then(its
        result)``: at once when the row comes free within BRIEF_WAIT_SECONDS, else from a thread that
        waits for it (``then(None)`` if that write fails, or the worker stops first). Nothing is
        started while a write of the same kind waits for that job (``then`` is not called)."""
        with self._lock:
            if (job_id, kind) in self._waiting:
                return
        try:
            result = locked_write(job_id, write, BRIEF_WAIT_SECONDS)
        except DatabaseError as exc:
            if not _lock_refused(exc):  # rolled back; the connection is fine after a lock wait ran out
                connections[jobq_settings().database].close()
                logger.warning("worker %s: %s: not written (%s)", self.worker_id, what, exc)
                then(None)
                return
        else:
            then(result)
            return
        with self._lock:
            if self._closed or (job_id, kind) in self._waiting:
                closed = self._closed
            else:
                closed = None
                self._waiting[(job_id, kind)] = None
        if closed is not None:
            if closed:
                then(None)
            return
        logger.warning(
            "worker %s: %s: another transaction holds the job's row; waiting for it on a connection of "
            "its own (the lane goes on)", self.worker_id, what,
        )  # fmt: skip
        threading.Thread(
            target=carrying_database(self._wait), args=(job_id, kind, write, then, what), daemon=True,
            name=f"jobq-lock-wait-{job_id}-{kind}",
        ).start()  # fmt: skip

    def _wait(
        self, job_id: int, kind: str, write: Callable[[], Any], then: Callable[[Any], None], what: str
    ) -> None:
        wrapper = connections[jobq_settings().database]
        result: Any = None
        try:
            wrapper.ensure_connection()
            with self._lock:
                closed = self._closed
                self._waiting[(job_id, kind)] = wrapper.connection
            if not closed:
                result = locked_write(job_id, write, 0)
                logger.info("worker %s: %s: written once the row was free", self.worker_id, what)
        except DatabaseError as exc:
            logger.warning("worker %s: %s: not written (%s)", self.worker_id, what, exc)
        finally:
            with self._lock:
                self._waiting.pop((job_id, kind), None)
            connections.close_all()
            then(result)

    def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the waiting writes to end."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._waiting:
                    return
            time.sleep(0.05)

    def close(self) -> None:
        """Cancel every waiting write (the worker stops: what it held goes back with its release, or
        by lease once the row's holder lets go)."""
        with self._lock:
            self._closed = True
            raw = [connection for connection in self._waiting.values() if connection is not None]
        for connection in raw:
            try:
                connection.cancel()
            except Exception as exc:  # already closed, or the server is away
                logger.debug("worker %s: could not cancel a waiting write: %s", self.worker_id, exc)
