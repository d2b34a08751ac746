"""A lane's slots: each runs the jobs handed to it, one at a time, and queues the outcome."""

from __future__ import annotations

import time

from ..conf import jobq_settings
from ..registry import find_task
from .base import WorkerBase
from .lanes import Lane, Running
from .runner import Outcome, SlotRunner, format_error
from .side import SideWriter


class SlotMixin(WorkerBase):
    _side_writer: SideWriter  # progress and lease writes off the task's connection

    def _slot(self, lane: Lane, number: int) -> None:
        runner = SlotRunner(self.worker_id, self.stopping, self._side_writer)
        try:
            while (entry := lane.work.get()) is not None:
                if self.stopping.is_set():  # a job claimed ahead: never started once stopping
                    with lane.cond:
                        lane.unstarted.append(entry)
                        lane.cond.notify_all()
                    continue
                self._run_one(lane, number, runner, entry)
        finally:
            runner.close()

    def _run_one(self, lane: Lane, number: int, runner: SlotRunner, entry: Running) -> None:
        current = entry
        started = time.monotonic()
        with self._lock:
            entry.deadline = started + entry.timeout if entry.timeout else None
            lane.current[number] = entry

        def on_attempt(attempt: int, fence: int) -> bool:
            nonlocal current
            current = self._next_run(current, number, attempt, fence)
            return True

        try:
            outcome = runner.run(entry.job, entry.fence, entry.attempt, on_attempt)
        except BaseException as exc:  # never let a job end the slot
            outcome = Outcome(fence=current.fence, attempt=current.attempt, error=format_error(exc))
        with self._lock:
            lane.current.pop(number, None)
            discard = current.timed_out or outcome.abandoned
            if discard and self._running.get(current.key) is current:
                del self._running[current.key]
        with lane.cond:
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
            old.job, fence, attempt, old.lane, timeout, time.monotonic() + timeout if timeout else None
        )
        with self._lock:
            if self._running.get(old.key) is old:
                del self._running[old.key]
            self._running[new.key] = new
            old.lane.current[number] = new
        return new
