"""Task concurrency caps (@task(max_running=N, max_running_per_key=M)): the worker's claim leaves out
the jobs of a task (a key) at its cap (sql/postgres/pick.py, _within_caps) and takes no more than its
room, read from the claim's snapshot; the claim's transaction then settles, under the tasks' locks,
what concurrent claims made stale."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..conf import jobq_settings
from .base import BaseJobManager

if TYPE_CHECKING:
    from ..models import Job


class CapManager(BaseJobManager):
    def _trim_to_task_caps(
        self, worker_id: str, jobs: list[Job], counted: Mapping[str, tuple[int | None, int | None]]
    ) -> list[Job]:
        """The claimed ``jobs`` that fit the ``counted`` caps (task -> max_running, max_running_per_key;
        a task claimed in seats has only its per-key cap here: its seats bound the rest). The claim kept
        to the room it saw, so
        this gives some back only when another claim took the same room at the same moment: those go
        back to PENDING in their place (run_at kept), without using up an attempt. Call inside the
        claim's transaction: the task locks (taken in name order, so claimers never deadlock) make
        the count that follows see every claim committed before, and this claim's own rows are
        already RUNNING in it; the locks last until the claim commits."""
        mine = [job for job in jobs if job.task in counted]
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
            most, key_most = counted[job.task]
            key = (job.task, job.concurrency_key)
            task_over = most is not None and per_task[job.task] > most
            key_over = (
                key_most is not None and job.concurrency_key is not None and running.get(key, 0) > key_most
            )
            if task_over or key_over:
                over.append(job)
                per_task[job.task] -= 1
                running[key] = running.get(key, 0) - 1
        if over:
            params: dict[str, Any] = {
                "worker_id": worker_id,
                "ids": [job.id for job in over],
                "fences": [job.fence for job in over],
                # no wake-up: while this claim's jobs run, every claim leaves these out
                "notify": False,
                "channel": jobq_settings().notify_channel,
            }
            self._execute(sql.RELEASE_UNSTARTED, params)
        dropped = {job.id for job in over}
        return [job for job in jobs if job.id not in dropped]

    @staticmethod
    def _spend_rations(params: dict[str, Any], jobs: list[Job]) -> list[Job]:
        """Take the ``jobs`` a statement of this claim took off the task rations of ``params`` (the
        permits left, in cap_ration), so the claim's next statement takes no more jobs of a
        rate-limited task than the permits the worker holds; ``jobs``."""
        rations = params.get("cap_ration")
        if jobs and rations and any(r is not None for r in rations):
            taken = Counter(job.task for job in jobs)
            params["cap_ration"] = [
                None if r is None else r - taken[t] for t, r in zip(params["cap_tasks"], rations, strict=True)
            ]
        return jobs

    def snooze(self, worker_id: str, runs: list[tuple[int, int, float]]) -> set[int]:
        """Give owned (id, fence, delay) runs back to PENDING without using up an attempt, each due
        after its delay; the ids that were still owned."""
        if not runs:
            return set()
        ids, fences, delays = (list(column) for column in zip(*runs, strict=True))
        params: dict[str, Any] = {"worker_id": worker_id, "ids": ids, "fences": fences, "delays": delays}
        return {row[0] for row in self._execute(self._sql().SNOOZE, params)}
