"""A workflow once enqueued: its jobs, its state, waiting for it and cancelling it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count

from ..exceptions import WaitTimeout
from ..shards import database_of_job
from ..status import ACTIVE, CancelCounts, JobStatus


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """Jobs per state ("PENDING", "WAITING", ...). ``finished``: none is left to run;
    ``succeeded``: finished with every job DONE."""

    counts: dict[str, int]

    @property
    def finished(self) -> bool:
        return not any(self.counts.get(JobStatus(s).name, 0) for s in ACTIVE)

    @property
    def succeeded(self) -> bool:
        return self.finished and sum(self.counts.values()) == self.counts.get("DONE", 0)

    @property
    def state(self) -> str:
        """ "running" (some job is unfinished), "succeeded" or "failed" (finished, not all DONE)."""
        if not self.finished:
            return "running"
        return "succeeded" if self.succeeded else "failed"


@dataclass(frozen=True, slots=True)
class Workflow:
    """A handle on an enqueued workflow: ``Workflow.get(id)`` finds one again."""

    id: int
    job_ids: list[int] = field(default_factory=list)  # in the order they were placed

    @classmethod
    def get(cls, workflow_id: int) -> Workflow:
        from ..models import Job

        jobs = Job.objects.using(database_of_job(workflow_id)).filter(workflow_id=workflow_id)
        ids = list(jobs.order_by("id").values_list("id", flat=True))
        return cls(workflow_id, ids)

    def jobs(self) -> Any:
        """The workflow's jobs (a queryset on the database its id names, never a replica's older rows)."""
        from ..models import Job

        return Job.objects.using(database_of_job(self.id)).filter(workflow_id=self.id)

    def status(self) -> WorkflowStatus:
        rows = self.jobs().order_by().values_list("status").annotate(n=Count("id"))
        return WorkflowStatus({JobStatus(status).name: n for status, n in rows})

    def wait(self, timeout: float, *, poll: float = 0.1) -> WorkflowStatus:
        """Block until every job has finished; its status then. WaitTimeout at ``timeout`` seconds.
        Not inside a transaction (its jobs could not run before it commits)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status.finished:
                return status
            if time.monotonic() >= deadline:
                raise WaitTimeout(f"workflow {self.id} did not finish within {timeout} s: {status.counts}")
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
            poll = min(poll * 1.5, 1.0)

    def cancel(self, *, by: str = "api") -> CancelCounts:
        """Cancel every unfinished job: WAITING and PENDING ones at once, RUNNING ones asked to stop.
        The WAITING ones go first: a job cancelled ahead of its dependent (in an earlier batch of
        cancel_many) would otherwise release a dependent set to run anyway (a group's "run"
        callback), for a worker to claim before the next batch cancels it."""
        from ..models import Job

        rows = list(self.jobs().filter(status__in=ACTIVE).values_list("id", "status"))
        waiting = [i for i, status in rows if status == JobStatus.WAITING]
        others = [i for i, status in rows if status != JobStatus.WAITING]
        first = Job.objects.cancel_many(ids=waiting, by=by) if waiting else CancelCounts()
        then = Job.objects.cancel_many(ids=others, by=by) if others else CancelCounts()
        return CancelCounts(first.cancelled + then.cancelled, first.requested + then.requested)
