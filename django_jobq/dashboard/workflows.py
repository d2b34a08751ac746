"""The dashboard's workflows: the most recent ones with an unfinished job, their jobs per state (one
bounded statement, sql/*/stats.py WORKFLOWS, on the jobq_job_workflow index)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db import connections
from django.utils import timezone

from ..conf import jobq_settings
from ..replica import read_alias
from ..sql import engine_of
from ..status import JobStatus

WORKFLOWS_LIMIT = 20  # unfinished workflows the dashboard lists, newest first


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowFigures:
    """One unfinished workflow: its jobs per state ("WAITING", "PENDING", ... -> jobs)."""

    id: int
    name: str
    created_at: dt.datetime | None  # None: its jobq_workflow row is gone (pruned)
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def jobs(self, state: str) -> int:
        return self.counts.get(state, 0)


def unfinished_workflows(limit: int = WORKFLOWS_LIMIT, using: str | None = None) -> list[WorkflowFigures]:
    """The ``limit`` most recent workflows that still have a WAITING, PENDING or RUNNING job, newest
    first, read from ``using`` (by default the read alias, django_jobq.replica)."""
    connection = connections[using or read_alias()]
    engine = engine_of(connection)
    params = {"limit": limit, "now": timezone.now() if jobq_settings().clock == "python" else None}
    found: dict[int, WorkflowFigures] = {}
    for workflow_id, name, created_at, status, jobs in engine.run(
        connection, engine.stats.WORKFLOWS, params
    ).rows:
        figures = found.get(workflow_id)
        if figures is None:
            figures = found[workflow_id] = WorkflowFigures(
                id=workflow_id, name=name or "", created_at=engine.text_time(created_at), counts={}
            )
        figures.counts[JobStatus(status).name] = jobs
    return list(found.values())
