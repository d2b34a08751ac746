"""A lane's slots: each runs the jobs handed to it, one at a time, and queues the outcome."""

from __future__ import annotations

import functools
import logging
import time

from django.db import Error as DatabaseError

from ..conf import jobq_settings
from ..models import Job
from ..registry import find_task, resolve_task
from .batching import BatchSlotMixin
from .classify import Outcome, class_path, format_error, timeout_outcome
from .lanes import Lane, Running
from .runner import SlotRunner
from .seat_pools import Sat
from .side import SideWriter

logger = logging.getLogger("django_jobq")


class SlotMixin(BatchSlotMixin):
    _side_writer: SideWriter  # progress and lease writes off the task's connection

    def _slot(self, lane: Lane, number: int) -> None:
        runner = SlotRunner(
            self.worker_id,
            self.stopping,
            self._side_writer,
            functools.partial(self._wait_to_retry, lane, number),
        )
        try:
            while (entry := lane.work.get()) is not None:
                while entry is not None:  # and then the parked job its seat is handed to, if any
                    entry = self._turn(lane, number, runner, entry)
        finally:
            runner.close()

    def _turn(self, lane: Lane, number: int, runner: SlotRunner, entry: Running) -> Running | None:
        """Run one claimed job, a capped queue's in a seat (worker/seats.py); the parked job to run
        next in the seat it leaves, if any."""
        sat = self._sit(lane, entry)
        if sat is Sat.PARKED:
            return None
        if sat is Sat.REFUSED or self.stopping.is_set() or not self._still_ours(entry):
            with lane.cond:  # never started: the dispatcher gives it back
                lane.unstarted.append(entry)
                lane.cond.notify_all()
            return self._stand(lane, entry, hand_off=True) if sat is Sat.SEATED else None
        task = resolve_task(entry.job.task)
        try:
            if task is not None and task.batch is not None:
                self._run_batch(lane, number, runner, entry, task)
            else:
                self._run_one(lane, number, runner, entry)
        finally:
            after = self._stand(lane, entry, hand_off=True) if sat is Sat.SEATED else None
        return after

    def _still_ours(self, entry: Running) -> bool:
        """May a slot start this job now? Not when a heartbeat found it lost, nor when its lease may
        have run out: a job claimed ahead waits in the lane while the heartbeat renews its lease, and
        if the renewals stop reaching the database (a partition, a stalled server) the reaper may
        already have handed it to another worker. Starting it only while the last known renewal is
        younger than the lease less one heartbeat leaves a heartbeat's margin before any reap."""
        conf = jobq_settings()
        with self._lock:
            age = time.monotonic() - entry.renewed_at
            if not entry.lost and age < conf.lease_seconds - conf.heartbeat_seconds:
                return True
        logger.warning(
            "worker %s: job %s was claimed ahead and its lease may have expired (last renewed %.1fs ago); "
            "giving it back unstarted", self.worker_id, entry.job.id, age,
        )  # fmt: skip
        return False

    def _run_one(self, lane: Lane, number: int, runner: SlotRunner, entry: Running) -> None:
        current = entry
        started = time.monotonic()
        with self._lock:
            entry.deadline = started + entry.timeout if entry.timeout else None
            lane.current[number] = entry
        with lane.cond:
            lane.started[number] = started

        def on_attempt(attempt: int, fence: int) -> bool:
            nonlocal current
            current = self._next_run(current, number, attempt, fence)
            return True

        try:
            outcome = runner.run(
                entry.job,
                entry.fence,
                entry.attempt,
                on_attempt,
                entry.cancel,
                permitted=entry.permitted,
                task_permitted=entry.task_permitted,
            )
        except BaseException as exc:  # never let a job end the slot
            outcome = Outcome(
                fence=current.fence,
                attempt=current.attempt,
                error=format_error(exc),
                error_class=class_path(exc),
            )
        if current.timed_out and not outcome.abandoned:  # whatever it returned: failed, as timed out
            outcome = timeout_outcome(current, outcome.duration)
        with self._lock:
            lane.current.pop(number, None)
            discard = outcome.abandoned
            if discard and self._running.get(current.key) is current:
                del self._running[current.key]
        with lane.cond:
            lane.started.pop(number, None)
            lane.busy -= 1
            lane.ran(time.monotonic() - started)
            if not discard:
                lane.outcomes.append((current, outcome))
            lane.cond.notify_all()

    def _next_run(self, old: Running, number: int, attempt: int, fence: int) -> Running:
        """An in-slot retry committed: the slot now runs the job under a new fence, with a fresh
        timeout. Replaces the old run's entry even if the watchdog had just timed it out (its failure
        write names the old fence, so the database refuses it)."""
        task = find_task(old.job.task)
        timeout = (task.timeout if task else None) or jobq_settings().job_timeout
        new = Running(
            old.job, fence, attempt, old.lane, timeout, time.monotonic() + timeout if timeout else None,
            cancel=old.cancel, seat_pools=old.seat_pools,
        )  # fmt: skip
        with self._lock:
            if self._running.get(old.key) is old:
                del self._running[old.key]
            self._running[new.key] = new
            old.lane.current[number] = new
        return new

    def _wait_to_retry(self, lane: Lane, number: int, delay: float) -> float | None:
        """Wait ``delay`` seconds in the slot before an in-slot retry, but only while the lane has
        nothing else due: None when the wait ran out (retry now, in this slot); otherwise the seconds
        still to wait, for a retry written back to the queue that frees the slot (0 when stopping).
        Other work is due when a claimed job waits for a slot or for this job's seat (worker/seats.py),
        or when the lane has no free slot and a due job waits in the database (checked at each wake-up
        and each poll interval)."""
        deadline = time.monotonic() + delay
        while True:
            left = deadline - time.monotonic()
            with self._lock:
                timed_out = (run := lane.current.get(number)) is not None and run.timed_out
            if self.stopping.is_set() or timed_out:  # a run past its timeout fails as such, no retry here
                return 0.0
            if left <= 0:  # retry now, in this slot: only in seats still usable
                return None if run is None or self._seats_fresh(lane, run) else 0.0
            with lane.cond:
                queued, free = not lane.work.empty(), lane.busy < lane.usable_slots(time.monotonic())
                queued = queued or (run is not None and self._seat_wanted(lane, run))
            if queued or (not free and self._other_work_due(lane)):
                return left
            with lane.cond:
                lane.cond.wait(timeout=min(left, self.poll_interval))

    def _other_work_due(self, lane: Lane) -> bool:
        try:
            return Job.objects.due_exists(lane.claims, exclude=(*lane.exclude, *lane.held))
        except DatabaseError:  # the database away: keep waiting; the retry's own write tells
            return False
