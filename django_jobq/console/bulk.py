"""Console actions over jobs: on a few named jobs at once (apply), or over every job of a filter as a
job of the queue itself (start, then the task django_jobq.admin_bulk) in batches.

Each batch is one short transaction on the queue's database: it locks the action's row
(jobq_bulk_action), reads its cursor, selects the next JOBQ["BULK_BATCH"] eligible jobs above it in id
order, changes them through the same guarded statement an action on a few jobs uses (requeue, cancel,
delete: each re-checks the status of every row it changes), and moves the cursor and the counts, all
committed together. A run killed mid-batch leaves nothing of that batch; the job, run again when its
lease expires, continues from the committed cursor: no job is skipped or acted on twice. Two runs at
once (the first one's worker only slow) take turns on the action's row lock and each batch starts from
the other's cursor. A cancel asked from the admin is seen by the next batch, which stops.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, NamedTuple

from django.db import connections, transaction
from django.db.models import QuerySet
from django.utils import timezone

from .. import validation
from ..conf import jobq_settings
from ..context import JobContext
from ..exceptions import BadSelection
from ..models import BulkAction, Job
from ..sql import engine_of
from ..status import ACTIVE, CANCELLED, DEAD, DONE, PENDING
from ..tasks import task
from .selection import Selection

TASK_NAME = "django_jobq.admin_bulk"
# The statuses each action changes (the guarded statements re-check them on every row).
ELIGIBLE: dict[str, tuple[int, ...]] = {
    BulkAction.Kind.REQUEUE: (DEAD, CANCELLED),
    BulkAction.Kind.CANCEL: ACTIVE,
    BulkAction.Kind.DELETE: (PENDING, DONE, DEAD, CANCELLED),  # never RUNNING
}


def eligible(jobs: QuerySet[Job], kind: str) -> QuerySet[Job]:
    """The jobs of ``jobs`` that the action ``kind`` would change: the exact count shown before it runs."""
    jobs = jobs.filter(status__in=ELIGIBLE[kind])
    if kind == BulkAction.Kind.CANCEL:  # a running job asked to stop already is not asked again
        jobs = jobs.filter(cancel_requested_at__isnull=True)
    return jobs


class Applied(NamedTuple):
    changed: int  # jobs the action changed
    asked: int = 0  # of those, running jobs asked to stop (cancel): they end CANCELLED when their run ends


def apply(kind: str, ids: Sequence[int], options: dict[str, Any], by: str) -> Applied:
    """Act on the jobs ``ids`` through the action's guarded statement (a job changed meanwhile,
    locked by another statement or gone is left as it is and not counted)."""
    if not ids:
        return Applied(0)
    if kind == BulkAction.Kind.REQUEUE:
        requeued = Job.objects.requeue_many(
            ids,
            run_at=_time(options.get("run_at")),
            priority=options.get("priority"),
            spread=options.get("spread", 0),
        )
        return Applied(len(requeued))
    if kind == BulkAction.Kind.CANCEL:
        counts = Job.objects.cancel_many(ids=ids, by=by)
        return Applied(counts.cancelled + counts.requested, counts.requested)
    if kind == BulkAction.Kind.DELETE:
        connection = connections[jobq_settings().database]
        engine = engine_of(connection)
        params = {"ids": list(ids), "statuses": list(ELIGIBLE[BulkAction.Kind.DELETE])}
        return Applied(len(engine.run(connection, engine.stats.DELETE_INACTIVE, params).rows))
    raise BadSelection(f"no such bulk action: {kind!r:.40}")


def start(
    kind: str, selection: Selection, total: int, *, options: dict[str, Any], by: str, query: str
) -> BulkAction:
    """Record a bulk action over ``selection`` (``total`` jobs when confirmed) and enqueue the job that
    runs it on JOBQ["BULK_QUEUE"], in one transaction: both exist, or neither."""
    if kind not in ELIGIBLE:
        raise BadSelection(f"no such bulk action: {kind!r:.40}")
    conf = jobq_settings()
    with transaction.atomic(using=conf.database):
        action = BulkAction.objects.using(conf.database).create(
            action=kind,
            selection=selection.as_dict(),
            options=options,
            query=query[:2000],
            total=total,
            requested_by=validation.string(by, "requested by", validation.MAX_NAME_LENGTH),
        )
        action.job_id = admin_bulk.using(queue=conf.bulk_queue).enqueue(action_id=action.pk)
        action.save(using=conf.database, update_fields=["job_id"])
    return action


def request_cancel(action_id: int) -> bool:
    """Ask a running bulk action to stop; its next batch sees it. An action whose job will run no more
    (halted: the job ended DEAD or CANCELLED, or is gone) has no next batch: it ends CANCELLED here,
    under its row lock (a batch of a job requeued meanwhile then finds it ended). False when it is
    not running or was asked already."""
    database = jobq_settings().database
    with transaction.atomic(using=database):
        action = BulkAction.objects.using(database).select_for_update().filter(pk=action_id).first()
        if action is None or action.state != BulkAction.State.RUNNING or action.cancel_requested_at:
            return False
        action.cancel_requested_at = timezone.now()
        action.save(using=database, update_fields=["cancel_requested_at"])
        if halted(action):
            _finish(action, BulkAction.State.CANCELLED)
    return True


def halted(action: BulkAction) -> bool:
    """Whether a running action's job will run no more batches: it ended DEAD or CANCELLED (a run
    that kept failing), or is gone. Requeueing the job resumes the action from its cursor."""
    if action.job_id is None:
        return False
    live = Job.objects.using(jobq_settings().database).filter(id=action.job_id, status__in=ACTIVE)
    return not live.exists()


def run_batch(action_id: int, size: int) -> BulkAction | None:
    """One batch of the bulk action ``action_id``, in one transaction; the action as it is after it
    (None when there is no such action)."""
    database = jobq_settings().database
    with transaction.atomic(using=database):
        # The action's row lock: one batch of an action at a time, its cursor read under the lock.
        action = BulkAction.objects.using(database).select_for_update().filter(pk=action_id).first()
        if action is None or action.state != BulkAction.State.RUNNING:
            return action
        if action.cancel_requested_at is not None:
            return _finish(action, BulkAction.State.CANCELLED)
        jobs = eligible(Selection.from_dict(action.selection).jobs(database), action.action)
        ids = list(jobs.filter(id__gt=action.cursor).order_by("id").values_list("id", flat=True)[:size])
        if not ids:
            return _finish(action, BulkAction.State.DONE)
        options = dict(action.options)
        if action.action == BulkAction.Kind.REQUEUE and options.get("run_at") is None:
            options["run_at"] = action.created_at.isoformat()  # the spread starts when it was asked
        changed = apply(action.action, ids, options, action.requested_by).changed
        action.done += changed
        action.skipped += len(ids) - changed
        action.cursor = ids[-1]
        action.save(using=database, update_fields=["done", "skipped", "cursor"])
        return action


def _finish(action: BulkAction, state: str) -> BulkAction:
    action.state, action.finished_at = state, timezone.now()
    action.save(using=jobq_settings().database, update_fields=["state", "finished_at"])
    return action


def _time(value: Any) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(str(value))


@task(name=TASK_NAME, takes_context=True, max_attempts=25)
def admin_bulk(context: JobContext, action_id: int) -> dict[str, Any]:
    """The bulk action ``action_id`` (a console "select all" action), batch after batch until its
    selection is exhausted or it is cancelled; its job's progress follows the action's."""
    size = jobq_settings().bulk_batch
    while True:
        action = run_batch(action_id, size)
        if action is None:
            return {"state": "missing"}
        if action.state != BulkAction.State.RUNNING:
            return {"state": action.state, "done": action.done, "skipped": action.skipped}
        if not context.set_progress(action.done + action.skipped, max(action.total, 1)):
            return {"state": "lost the job's lease"}  # its next run continues from the cursor
