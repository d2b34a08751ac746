"""The heartbeat thread: renews every lease in one statement, records the worker, enforces timeouts
and notices a lane whose every slot is stuck."""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from typing import Any

from django.db import Error as DatabaseError
from django.db import connections

from .. import signals
from ..conf import jobq_settings
from ..models import Job
from .base import is_connection_error
from .classify import timeout_outcome
from .dispatch import DispatchMixin

logger = logging.getLogger("django_jobq")

EXIT_STUCK = 3  # the worker's exit status when a lane stayed wedged: let the supervisor restart it


class HeartbeatMixin(DispatchMixin):
    supervision: dict[str, Any] | None  # set by Worker; what a supervisor told it (supervisor/link.py)

    def _heartbeat_loop(self) -> None:
        conf = jobq_settings()
        next_beat = time.monotonic() + conf.heartbeat_seconds
        while not self.finished.wait(min(1.0, conf.heartbeat_seconds)):
            self._enforce_timeouts()
            self._check_stuck(conf.lease_seconds)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + conf.heartbeat_seconds
                try:
                    self._heartbeat(conf.lease_seconds)
                except DatabaseError as exc:
                    connections[conf.database].close()
                    if is_connection_error(exc):
                        self.outage.failed("the heartbeat", exc)
                    else:
                        logger.warning("worker %s: heartbeat failed (%s)", self.worker_id, exc)
                    next_beat = time.monotonic() + min(1.0, conf.heartbeat_seconds)
                else:
                    self.outage.ok()

    def _heartbeat(self, lease: float) -> None:
        with self._lock:  # a run past its timeout too: its job stays ours until its function returns
            # not the runs whose outcome a lane is writing now: locking their rows would only make that
            # write find them busy (a write waiting for a row another transaction holds keeps its
            # place in the row's lock queue, ahead of any reaper pass)
            held = [key for key, entry in self._running.items() if not entry.writing]
        Job.objects.bound_statements()
        sent = time.monotonic()  # the renewed leases run for at least ``lease`` seconds from here
        beat = Job.objects.beat(self.worker_id, held, lease)
        with self._lock:
            for key in held:
                if (entry := self._running.get(key)) is not None:
                    if key in beat.lost:
                        entry.lost = True  # a slot never starts it (claimed ahead, not yet started)
                    elif key not in beat.busy:  # renewed (a busy row was not: never counted as such)
                        entry.renewed_at = max(entry.renewed_at, sent)
            lost = [
                key for key in held if key in beat.lost and (r := self._running.get(key)) and not r.writing
            ]
            told = [
                entry for key in beat.asked if (entry := self._running.get(key)) and not entry.cancel.is_set()
            ]
        try:
            self._renew_seats(lease)  # the capped queues' seats (worker/seats.py)
        except DatabaseError as exc:  # they age, and no job starts in one past its margin
            if is_connection_error(exc):
                raise
            logger.warning("worker %s: could not renew its seats (%s)", self.worker_id, exc)
        for key in beat.busy:
            self._renew_when_free(key, lease)
        for entry in told:  # outside the lock: an async task's cancellation is scheduled on its loop
            logger.info("job %s (%s): a cancel was asked; its run is told to stop", entry.job.id, entry.job.task,
                        extra={"job_id": entry.job.id, "task": entry.job.task})  # fmt: skip
            entry.cancel.set()
        if lost:
            logger.warning(
                "worker %s lost the lease of job(s) %s; their outcome will be refused",
                self.worker_id, [job_id for job_id, _ in lost],
            )  # fmt: skip
            for key in lost:
                if (entry := self._running.get(key)) is not None:
                    signals.send(signals.job_lease_lost, job=entry.job, worker_id=self.worker_id)
        self._beat(stopped=False)

    def _renew_when_free(self, key: tuple[int, int], lease: float) -> None:
        """Renew a lease whose row another transaction held (lock_waits.py): waiting for the row, the
        renewal takes it before any reaper pass can; the run counts as renewed only once it is."""
        job_id, fence = key

        def write() -> float | None:
            sent = time.monotonic()
            return sent if Job.objects.renew_lease(job_id, self.worker_id, lease, fence=fence) else None

        def then(sent: float | None) -> None:
            if sent is not None:
                with self._lock:
                    if (entry := self._running.get(key)) is not None:
                        entry.renewed_at = max(entry.renewed_at, sent)

        self.lock_waits.write(job_id, f"renew:{fence}", write, then, f"job {job_id}'s lease renewal")

    def _beat(self, *, stopped: bool) -> None:
        with self._lock:
            lanes = {name: lane.slots for name, lane in self.lanes.items()}
            stuck = {name: n for name, lane in self.lanes.items() if (n := lane.stuck())}
            running = len(self._running)
        self._db(
            lambda: Job.objects.worker_beat(
                self.worker_id, hostname=socket.gethostname(), pid=os.getpid(), lanes=lanes,
                running=running, stopped=stopped, stuck=stuck, supervisor=self.supervision,
            ),
            attempts=2,
        )  # fmt: skip

    def _enforce_timeouts(self) -> None:
        """Mark the runs past their timeout. An ``async def`` task is cancelled by its own slot; a plain
        function cannot be interrupted, so its job stays RUNNING, leased and counted against its caps
        until the function returns (it never runs twice at once), and then fails with JobTimeout
        whatever it returned. A function that never returns wedges its slot (_check_stuck)."""
        now = time.monotonic()
        with self._lock:
            late = [
                r
                for r in self._running.values()
                if r.deadline is not None and now > r.deadline and not r.timed_out
            ]
            for entry in late:
                entry.timed_out = True
        for entry in late:
            logger.error(
                "job %s (%s) ran past its timeout of %ss; it fails with JobTimeout when its function returns",
                entry.job.id, entry.job.task, entry.timeout,
            )  # fmt: skip

    def _fail_timed_out(self) -> None:
        """Stopping with slots still inside timed-out functions (which end with the process): write each
        run's JobTimeout failure instead of releasing it."""
        with self._lock:
            late = [r for r in self._running.values() if r.timed_out and not r.writing]
            for entry in late:
                entry.writing = True
        for entry in late:
            outcome = timeout_outcome(entry)
            fail = functools.partial(
                Job.objects.fail, entry.job.id, self.worker_id, outcome.error, fence=entry.fence,
                error_class=outcome.error_class,
            )  # fmt: skip
            try:
                self._db(fail, attempts=3)
            except DatabaseError as exc:
                logger.error("job %s: could not record its timeout (%s)", entry.job.id, exc)
            self._forget(entry)

    def _check_stuck(self, patience: float) -> None:
        """A lane whose every slot is inside a timed-out job serves nothing; once it has been so for
        ``patience`` seconds, stop the worker with EXIT_STUCK so that its supervisor restarts it."""
        now = time.monotonic()
        for lane in self.lanes.values():
            with self._lock:
                wedged = lane.stuck() >= lane.slots
            if not wedged:
                lane.stuck_since = None
            elif lane.stuck_since is None:
                lane.stuck_since = now
                logger.error("worker %s: every slot of lane %s is stuck in a job past its timeout",
                             self.worker_id, lane.queue)  # fmt: skip
            elif now - lane.stuck_since >= patience and not self.exit_code:
                logger.error("worker %s: lane %s stuck for %.0fs; stopping with exit status %d",
                             self.worker_id, lane.queue, now - lane.stuck_since, EXIT_STUCK)  # fmt: skip
                self.exit_code = EXIT_STUCK
                self.stop()
