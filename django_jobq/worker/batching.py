"""A slot running a batch task (django_jobq.batches): it takes the job the lane handed it as the batch's
first, claims the batch's other jobs itself (up to its size, waiting at most its wait once the first was
due), runs them in one call and queues one outcome per job, which the dispatcher writes as any other."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import Error as DatabaseError
from django.db import connections
from django.utils import timezone

from ..conf import jobq_settings
from ..models import Job
from ..tasks import Task
from .base import is_connection_error
from .batch_runner import run_batch
from .classify import Outcome, class_path, format_error, timeout_outcome
from .lanes import Lane, Running
from .runner import SlotRunner
from .seats import SeatMixin

logger = logging.getLogger("django_jobq")
FIRST_PAUSE = 0.01  # seconds between a filling batch's claims: doubling from this ...
LONGEST_PAUSE = 0.25  # ... up to this


class BatchSlotMixin(SeatMixin):
    def _run_batch(
        self, lane: Lane, number: int, runner: SlotRunner, first: Running, task: Task[Any, Any]
    ) -> None:
        started = time.monotonic()
        with self._lock:
            lane.current[number] = first
        with lane.cond:
            lane.started[number] = started
        members = [first, *self._fill(lane, first, task)]
        if not self._seats_fresh(lane, first):  # a seat's renewals stopped while it filled
            self._set_aside(lane, number, members)
            return
        began = time.monotonic()
        with self._lock:
            for entry in members:
                entry.deadline = began + entry.timeout if entry.timeout else None
        try:
            outcomes = run_batch(runner, task, members)
        except BaseException as exc:  # never let a batch end the slot
            error, kind = format_error(exc), class_path(exc)
            outcomes = [
                Outcome(fence=e.fence, attempt=e.attempt, error=error, error_class=kind) for e in members
            ]
        ended = [
            (e, timeout_outcome(e, o.duration) if e.timed_out and not o.abandoned else o)
            for e, o in zip(members, outcomes, strict=True)
        ]
        with self._lock:
            lane.current.pop(number, None)
            for entry, outcome in ended:
                if outcome.abandoned and self._running.get(entry.key) is entry:
                    del self._running[entry.key]
        if len(members) > 1:
            self._stand(lane, first, len(members) - 1)  # the first's seat is its slot's
        with lane.cond:
            lane.started.pop(number, None)
            lane.busy -= 1  # the first job's place; the others were never counted in the lane
            lane.ran(time.monotonic() - started)
            lane.outcomes.extend((e, o) for e, o in ended if not o.abandoned)
            lane.cond.notify_all()

    def _set_aside(self, lane: Lane, number: int, members: list[Running]) -> None:
        """A batch that may not start: its jobs go back unstarted (the dispatcher gives them back), their
        seats free (the first's is its slot's)."""
        with self._lock:
            lane.current.pop(number, None)
        if len(members) > 1:
            self._stand(lane, members[0], len(members) - 1)
        with lane.cond:
            lane.started.pop(number, None)
            lane.busy += len(members) - 1  # the others join the first in the lane's count, to go back
            lane.unstarted += members
            lane.cond.notify_all()

    def _fill(self, lane: Lane, first: Running, task: Task[Any, Any]) -> list[Running]:
        """Claim the batch's other jobs: due jobs of its task (and key) in the first one's queue, up to
        the batch's size, claiming again while it waits to fill (at most ``wait`` seconds after the
        first was due); not past a stop, a pause of its queue or this worker's max_jobs."""
        batch = task.batch
        assert batch is not None
        job = first.job
        since_due = (timezone.now() - job.run_at).total_seconds() if job.run_at is not None else 0.0
        deadline = time.monotonic() + max(0.0, batch.wait - max(0.0, since_due))
        key = batch.key_of(job.payload)
        lease = jobq_settings().lease_seconds
        members: list[Running] = []
        pause = FIRST_PAUSE
        while (
            len(members) < batch.size - 1
            and not self.stopping.is_set()
            and job.queue not in self._paused_now()
        ):
            with self._lock:
                room = batch.size - 1 - len(members)
                if self.max_jobs is not None:
                    room = min(room, self.max_jobs - self._claimed)
            if room <= 0:
                break
            found = self._claim_members(lane, first, task, room, key, lease)
            if found is None:
                break
            members += found
            left = deadline - time.monotonic()
            if len(members) >= batch.size - 1 or left <= 0:
                break
            if not found:
                self.stopping.wait(min(left, pause))
                pause = min(pause * 2, LONGEST_PAUSE)
        return members

    def _claim_members(
        self, lane: Lane, first: Running, task: Task[Any, Any], room: int, key: Any, lease: float
    ) -> list[Running] | None:
        """One claim of the batch's jobs, recorded as running (renewed by the heartbeat, cancellable);
        None when the database refused or is away (the batch runs with what it has; a claim whose reply
        was lost leaves its jobs to their leases, as a crashed worker's)."""
        batch = task.batch
        assert batch is not None
        queue = first.job.queue
        seated = queue in lane.seats
        if seated and (room := self._sit_more(lane, queue, room)) == 0:  # each job in a seat of its own
            return []
        with self._batch_claims:
            sent = time.monotonic()
            try:
                Job.objects.bound_statements()
                jobs = Job.objects.claim_for_batch(
                    self.worker_id, queue, task.name, room, field=batch.key, value=key, lease_seconds=lease,
                    seated=seated,
                )  # fmt: skip
            except DatabaseError as exc:
                if seated:
                    self._stand(lane, first, room)
                if is_connection_error(exc):
                    connections[jobq_settings().database].close()
                logger.warning("worker %s: batch of job %s runs with what it has (%s)", self.worker_id,
                               first.job.id, exc)  # fmt: skip
                return None
            if seated and room > len(jobs):
                self._stand(lane, first, room - len(jobs))
            entries = [
                Running(job, job.fence, job.attempts, lane, first.timeout, renewed_at=sent) for job in jobs
            ]
            with self._lock:
                self._claimed += len(entries)
                for entry in entries:
                    self._running[entry.key] = entry
        return entries
