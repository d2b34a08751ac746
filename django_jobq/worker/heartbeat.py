"""The heartbeat thread: renews every lease in one statement, records the worker, enforces timeouts
and notices a lane whose every slot is stuck."""

from __future__ import annotations

import logging
import os
import socket
import time

from django.db import Error as DatabaseError
from django.db import connections

from ..conf import jobq_settings
from ..exceptions import JobTimeout
from ..models import Job
from .dispatch import DispatchMixin
from .runner import Outcome, format_error

logger = logging.getLogger("django_jobq")

EXIT_STUCK = 3  # the worker's exit status when a lane stayed wedged: let the supervisor restart it


class HeartbeatMixin(DispatchMixin):
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
                    logger.warning("worker %s: heartbeat failed (%s)", self.worker_id, exc)
                    next_beat = time.monotonic() + min(1.0, conf.heartbeat_seconds)

    def _heartbeat(self, lease: float) -> None:
        with self._lock:
            held = [key for key, r in self._running.items() if not r.timed_out]
        Job.objects.bound_statements()
        refused = Job.objects.heartbeat(self.worker_id, held, lease)
        with self._lock:
            lost = [key for key in held if key in refused and (r := self._running.get(key)) and not r.writing]
        if lost:
            logger.warning(
                "worker %s lost the lease of job(s) %s; their outcome will be refused",
                self.worker_id, [job_id for job_id, _ in lost],
            )  # fmt: skip
        self._beat(stopped=False)

    def _beat(self, *, stopped: bool) -> None:
        with self._lock:
            lanes = {name: lane.slots for name, lane in self.lanes.items()}
            stuck = {name: n for name, lane in self.lanes.items() if (n := lane.stuck())}
            running = len(self._running)
        self._db(
            lambda: Job.objects.worker_beat(
                self.worker_id, hostname=socket.gethostname(), pid=os.getpid(), lanes=lanes,
                running=running, stopped=stopped, stuck=stuck,
            ),
            attempts=2,
        )  # fmt: skip

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [
                r
                for r in self._running.values()
                if r.deadline is not None and now > r.deadline and not r.timed_out
            ]
            for entry in late:
                entry.timed_out = True
                del self._running[entry.key]
        for entry in late:
            # A sync function cannot be interrupted: fail the job now so it is retried; the slot stays busy
            # until the function returns, and whatever it returns then is discarded.
            error = format_error(JobTimeout(f"job {entry.job.id} ran past its timeout"))
            self._write_failure(entry, Outcome(fence=entry.fence, attempt=entry.attempt, error=error))()

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
