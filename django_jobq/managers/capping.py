"""Task concurrency caps (@task(max_running=N, max_running_per_key=M)): a claim that took jobs of a
capped task keeps only those that fit, in the claim's own transaction, and snoozes the rest."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from ..conf import jobq_settings
from ..registry import capped_tasks
from .base import BaseJobManager

if TYPE_CHECKING:
    from ..models import Job


class CapManager(BaseJobManager):
    def _trim_to_task_caps(self, worker_id: str, jobs: list[Job]) -> list[Job]:
        """The claimed ``jobs`` that fit their task's caps; the others go back to PENDING, due again
        after JOBQ["POLL_INTERVAL"], without using up an attempt. Call inside the claim's transaction:
        the task locks (taken in name order, so claimers never deadlock) make the count that follows
        see every claim committed before, and this claim's own rows are already RUNNING in it."""
        tasks = capped_tasks()
        mine = [job for job in jobs if job.task in tasks]
        if not mine:
            return jobs
        sql = self._sql()
        names = sorted({job.task for job in mine})
        for name in names:
            self._execute(sql.CAP_LOCK, {"name": f"task:{name}"})
        running = {(t, k): n for t, k, n in self._execute(sql.RUNNING_BY_TASK, {"tasks": names})}
        per_task: Counter[str] = Counter()
        for (task, _), n in running.items():
            per_task[task] += n
        over: list[Job] = []
        for job in reversed(mine):  # the last claimed give way first
            task = tasks[job.task]
            key = (job.task, job.concurrency_key)
            task_over = task.max_running is not None and per_task[job.task] > task.max_running
            key_over = (
                task.max_running_per_key is not None
                and job.concurrency_key is not None
                and running.get(key, 0) > task.max_running_per_key
            )
            if task_over or key_over:
                over.append(job)
                per_task[job.task] -= 1
                running[key] = running.get(key, 0) - 1
        if over:
            self.snooze(worker_id, [(job.id, job.fence, jobq_settings().poll_interval) for job in over])
        dropped = {job.id for job in over}
        return [job for job in jobs if job.id not in dropped]

    def snooze(self, worker_id: str, runs: list[tuple[int, int, float]]) -> set[int]:
        """Give owned (id, fence, delay) runs back to PENDING without using up an attempt, each due
        after its delay; the ids that were still owned."""
        if not runs:
            return set()
        ids, fences, delays = (list(column) for column in zip(*runs, strict=True))
        params: dict[str, Any] = {"worker_id": worker_id, "ids": ids, "fences": fences, "delays": delays}
        return {row[0] for row in self._execute(self._sql().SNOOZE, params)}
