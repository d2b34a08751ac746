"""Claiming a batch task's further jobs (django_jobq.batches): the worker's claim takes a batch's first
job; the slot that runs it claims the rest with claim_for_batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import transaction

from .. import validation
from ..conf import jobq_settings
from .base import BaseJobManager

if TYPE_CHECKING:
    from ..models import Job


class BatchClaimManager(BaseJobManager):
    def claim_for_batch(
        self, worker_id: str, queue: str, task: str, limit: int, *, field: str | None = None,
        value: Any = None, lease_seconds: float | None = None, seated: bool = False,
    ) -> list[Job]:  # fmt: skip
        """Take up to ``limit`` due jobs of ``task`` in ``queue`` (with ``field``, only those whose
        payload holds ``value`` there; a missing field reads as None), as a claim takes them: RUNNING
        for ``worker_id``, attempts + 1, a new fence, leased; in claim order. A queue with
        JOBQ["QUEUES"][q]["MAX_RUNNING"] gives no more than its cap leaves room for, unless ``seated``:
        the caller holds a seat for each job it may take (worker/seats.py)."""
        sql = self._sql()
        params: dict[str, Any] = {
            "worker_id": validation.name(worker_id, "worker_id"),
            "queue": validation.queue(queue),
            "task": validation.name(task, "task name"),
            "limit": validation.integer(limit, "limit", 1, 100_000),
            "lease": self._lease(lease_seconds),
            "field": field,
            "path": None if field is None else f"$.{field}",
            "value": validation.dump_json(value, what="batch key"),
            "ids": [],
            "cap": None if seated else jobq_settings().caps().get(queue),
        }
        if params["cap"] is None:
            jobs = self._jobs(sql.CLAIM_BATCH, params)
        else:
            with transaction.atomic(using=self.connection.alias):
                self._execute(sql.CAP_LOCK, {"name": f"queue:{queue}"})
                jobs = self._jobs(sql.CLAIM_BATCH_CAPPED, params)
        return sorted(jobs, key=lambda job: (job.priority, job.run_at, job.id))  # RETURNING has no order
