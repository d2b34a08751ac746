"""State shared by the worker's parts, and how they talk to the database."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import psycopg
from django.db import Error as DatabaseError
from django.db import InterfaceError, OperationalError, connections

from ..conf import jobq_settings
from ..models import Job
from .lanes import Lane, Running
from .lock_waits import LockWaits
from .outage import Outage

if TYPE_CHECKING:
    from ..notify.idle_lock import IdleLock
    from ..notify.listener import Listener
    from ..reaper import Reaper

logger = logging.getLogger("django_jobq")
T = TypeVar("T")


def is_connection_error(exc: BaseException) -> bool:
    """A fault of the connection or the server (retry later), as opposed to a statement the database
    refuses (DataError, IntegrityError, ProgrammingError: retrying would fail the same way) or one that
    waited past JOBQ["LOCK_TIMEOUT"] for a row another transaction holds (the database answers)."""
    if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
        return False
    return isinstance(exc, OperationalError | InterfaceError)


def is_lock_conflict(exc: BaseException) -> bool:
    """PostgreSQL rolled the statement back to break a deadlock or a serialisation conflict (the other
    side goes on): nothing of it was written, so running it again is safe."""
    return isinstance(exc.__cause__, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)


LOCK_CONFLICT_RETRIES = 5  # runs again of a statement PostgreSQL rolled back to break a lock cycle


class WorkerBase:
    """The attributes every part of the worker shares. ``_lock`` guards ``_running``, ``processed``,
    ``_claimed``, ``_ended`` and each lane's ``current``."""

    lanes: dict[str, Lane]
    worker_id: str
    burst: bool
    max_jobs: int | None
    grace: float
    poll_interval: float
    listen: bool
    wake_in_process: bool
    reaper: Reaper | None
    stopping: threading.Event  # no new claims; finish what runs
    abandon: threading.Event  # grace is over (or second signal): dispatchers leave now
    hard: threading.Event  # second signal
    finished: threading.Event  # background threads exit
    processed: (
        int  # runs that ended (done, failed, cancelled): not a snooze, nor a start a rate limit refused
    )
    exit_code: int  # what the process should exit with (EXIT_STUCK when a lane wedged)
    listener: Listener | None
    idle_lock: IdleLock | None
    outage: Outage  # the database's unavailability, logged once (worker/outage.py)
    lock_waits: LockWaits  # writes waiting for a row another transaction holds (worker/lock_waits.py)
    _claimed: int
    _ended: int  # writes that may have released jobs (_settled_others; burst: see dispatch.py)
    _cycling: int  # lanes inside a cycle (from taking their work to handing the claimed jobs out)
    _running: dict[tuple[int, int], Running]
    _unknown_tasks: set[str]  # task names this worker gave jobs back for (warned once each)
    _lock: threading.Lock
    # held while a slot claims a batch's jobs and records them as running, and while the dispatcher
    # releases the jobs it does not know of after a lost reply: it never takes a batch's fresh claims
    _batch_claims: threading.Lock

    def stop(self) -> None:
        raise NotImplementedError

    def _paused_now(self) -> frozenset[str]:
        """The paused queues (worker/pausing.py)."""
        raise NotImplementedError

    def _db(self, op: Callable[[], T], *, attempts: int | None = None) -> T | None:
        """Run ``op`` on this thread's bounded connection; on a connection error drop the connection and
        retry with backoff. Gives up (None) after ``attempts`` tries, or, without ``attempts``, when a
        hard stop is requested. A statement the database refuses is raised at once, never retried."""
        delay, tries, conflicts = 0.05, 0, 0
        while True:
            try:
                Job.objects.bound_statements()
                result = op()
            except DatabaseError as exc:
                if not is_connection_error(exc):
                    raise
                if is_lock_conflict(exc) and conflicts < LOCK_CONFLICT_RETRIES:
                    # The connection is fine: run the statement again at once, as the manager's
                    # retrying_conflicts does for callers (a worker's batch of outcomes can meet an
                    # enqueue of the same dedupe key in the unique index).
                    conflicts += 1
                    logger.info("worker %s: a statement was rolled back to break a lock cycle; running it "
                                "again", self.worker_id)  # fmt: skip
                    time.sleep(random.uniform(0, 0.005 * 2**conflicts))
                    continue
                tries += 1
                connections[jobq_settings().database].close()
                if (attempts is None and self.hard.is_set()) or (attempts is not None and tries >= attempts):
                    logger.error("worker %s: database unavailable, giving up: %s", self.worker_id, exc)
                    return None
                self.outage.failed("a statement", exc)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
            else:
                self.outage.ok()
                return result

    def _wake_all(self) -> None:
        for lane in self.lanes.values():
            with lane.cond:
                lane.woken = True
                lane.cond.notify_all()

    def _forget(self, entry: Running, *, ended: bool = True) -> None:
        """The run's outcome is written: it is no longer this worker's; ``ended``: it counts in
        ``processed`` (False for a job that waits again: snoozed, or refused by a rate limit)."""
        with self._lock:
            if self._running.get(entry.key) is entry:
                del self._running[entry.key]
            if ended:
                self.processed += 1

    def _settled_others(self) -> None:
        """A write of this worker may have released jobs (a workflow's next steps, in any queue) after
        the snapshot of a lane's last claim: a burst worker's lanes claim again before they end."""
        with self._lock:
            self._ended += 1
        if self.burst:
            self._wake_all()
