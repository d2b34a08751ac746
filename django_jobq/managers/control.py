"""Job control: cancelling jobs, one (cancel) or by a filter (cancel_many); rescheduling a queued one."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from .. import validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob
from ..shards import database_of_job, databases_of_queue, every_database, on_shard
from ..status import FINISHED, CancelCounts, CancelOutcome, JobStatus
from .base import BaseJobManager, retrying_conflicts

MAX_JOB_ID = (1 << 63) - 1
CANCEL_BATCH = 1000  # jobs locked and cancelled per statement by cancel_many
MAX_CANCEL_IDS = 100_000  # ids one cancel_many(ids=...) call may name


def _by(value: Any) -> str:
    return validation.string(value, "cancelled by", validation.MAX_NAME_LENGTH)


class ControlManager(BaseJobManager):
    def cancel(self, job_id: int, *, by: str = "api") -> CancelOutcome:
        """Cancel one job: a PENDING job ends CANCELLED at once (one guarded statement; its dedupe key
        is freed); a RUNNING job is asked to stop (its ``context.cancelled`` is set within a heartbeat,
        and its run ends CANCELLED whatever it returns); a finished job is left alone. ``by`` says who
        asked (kept in ``cancelled_by``)."""
        asked = validation.integer(job_id, "job id", 1, MAX_JOB_ID)
        by = _by(by)
        job_id = self.current_id(asked)
        with on_shard(database_of_job(job_id)):
            outcome = self._cancel_one(job_id, by)
        if outcome is CancelOutcome.NOT_FOUND and (moved := self.current_id(job_id)) != job_id:
            with on_shard(database_of_job(moved)):  # moved meanwhile (a move under way): where it went
                outcome = self._cancel_one(moved, by)
        return outcome

    def _cancel_one(self, job_id: int, by: str) -> CancelOutcome:
        while True:
            rows = self._cancel([job_id], by)
            if rows:
                ended = rows[0][1] == JobStatus.CANCELLED
                return CancelOutcome.CANCELLED if ended else CancelOutcome.CANCEL_REQUESTED
            found = self.filter(pk=job_id).values_list("status", flat=True).first()
            if found is None:
                return CancelOutcome.NOT_FOUND
            if found in FINISHED:
                return CancelOutcome.ALREADY_FINISHED
            # requeued between the two reads: PENDING again, so cancel it

    def cancel_many(
        self,
        *,
        ids: Sequence[int] | None = None,
        queue: str | None = None,
        task: str | None = None,
        tags: Sequence[str] | None = None,
        by: str = "api",
    ) -> CancelCounts:
        """Cancel every PENDING or RUNNING job that ``ids``, ``queue``, ``task`` and ``tags`` (a job
        carrying every one of them) all name (at least one of them), as cancel() does each one, in
        batches of CANCEL_BATCH (each its own statement, in the caller's transaction if there is one).
        Jobs enqueued after the call began are left."""
        by = _by(by)
        if ids is None and queue is None and task is None and not tags:
            raise InvalidJob("cancel_many() needs ids, a queue, a task or tags (it never cancels every job)")
        queue = None if queue is None else validation.queue(queue)
        task = None if task is None else validation.name(task, "task")
        tags_json = validation.tags_json(tags)
        wanted: list[int] | None = None
        if ids is not None:
            if isinstance(ids, str | bytes) or not isinstance(ids, Sequence) or len(ids) > MAX_CANCEL_IDS:
                raise InvalidJob(f"ids must be a sequence of at most {MAX_CANCEL_IDS} job ids")
            wanted = sorted(
                set(self.current_ids([validation.integer(i, "job id", 1, MAX_JOB_ID) for i in ids]))
            )
        if not jobq_settings().shards:
            return self._cancel_many_here(wanted, queue, task, tags_json, by)
        cancelled = requested = 0
        for alias in databases_of_queue(queue) if queue is not None else every_database():
            mine = None if wanted is None else [i for i in wanted if database_of_job(i) == alias]
            if mine == []:
                continue
            with on_shard(alias):
                counts = self._cancel_many_here(mine, queue, task, tags_json, by)
            cancelled, requested = cancelled + counts.cancelled, requested + counts.requested
        return CancelCounts(cancelled, requested)

    def _cancel_many_here(
        self, wanted: list[int] | None, queue: str | None, task: str | None, tags_json: str | None, by: str
    ) -> CancelCounts:
        """cancel_many on the database this context works on."""
        until = self._execute(self._sql().NEWEST_ID, {})[0][0]
        cancelled = requested = after = 0
        while True:
            if wanted is not None:
                batch = [i for i in wanted if i > after][:CANCEL_BATCH]
            else:
                params = {
                    "after": after, "until": until, "queue": queue, "task": task, "tags": tags_json,
                    "limit": CANCEL_BATCH,
                }  # fmt: skip
                select = self._sql().CANCEL_SELECT if tags_json is None else self._sql().CANCEL_SELECT_TAGGED
                batch = sorted(row[0] for row in self._execute(select, params))
            if not batch:
                return CancelCounts(cancelled, requested)
            rows = self._cancel(batch, by, queue, task, tags_json)
            cancelled += sum(1 for row in rows if row[1] == JobStatus.CANCELLED)
            requested += sum(1 for row in rows if row[1] == JobStatus.RUNNING)
            if wanted is not None or tags_json is None:  # the tagged selection needs no cursor
                after = batch[-1]

    def _cancel(
        self,
        ids: list[int],
        by: str,
        queue: str | None = None,
        task: str | None = None,
        tags: str | None = None,
    ) -> list[tuple[Any, ...]]:
        params = {"ids": ids, "by": by, "queue": queue, "task": task, "tags": tags}
        return retrying_conflicts(self.connection.alias, lambda: self._execute(self._sql().CANCEL, params))

    def reschedule(
        self, job_id: int, *, run_at: dt.datetime | None = None, priority: int | None = None
    ) -> bool:
        """Move a PENDING job to ``run_at`` (aware) and/or give it ``priority``, in one guarded statement;
        False when the job is not PENDING (claimed meanwhile, finished) or does not exist."""
        job_id = self.current_id(validation.integer(job_id, "job id", 1, MAX_JOB_ID))
        if run_at is None and priority is None:
            raise InvalidJob("reschedule() needs run_at or priority")
        params = self._notify_params({
            "id": job_id,
            "run_at": None if run_at is None else validation.aware(run_at, "run_at"),
            "priority": None if priority is None else validation.priority(priority),
        })  # fmt: skip
        with on_shard(database_of_job(job_id)):
            rows = self._execute(self._sql().RESCHEDULE, params)
            self._wake([row[1] for row in rows if row[2]])
        if not rows and (moved := self.current_id(job_id)) != job_id:  # moved meanwhile: where it went
            params["id"] = moved
            with on_shard(database_of_job(moved)):
                rows = self._execute(self._sql().RESCHEDULE, params)
                self._wake([row[1] for row in rows if row[2]])
        return bool(rows)
