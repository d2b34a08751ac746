"""A job row as Django's TaskResult.

Statuses: PENDING (new, or a retry scheduled) and WAITING (its dependencies unfinished) -> READY,
RUNNING -> RUNNING, DONE -> SUCCESSFUL, DEAD -> FAILED, CANCELLED -> FAILED (Django has no cancelled
status; ``cancelled_by`` and ``last_error`` on the job row say who cancelled it). ``worker_ids`` has
one entry per attempt, in order: the worker of each attempt in the row's error history, then the
worker of the running or successful attempt. ``errors`` has one
TaskError per failed attempt, oldest first (as many as JOBQ["ERROR_HISTORY"] keeps).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ..conf import jobq_settings
from ..exceptions import UnknownShard
from ..shards import database_of_job
from ..status import JobStatus
from .compat import TaskError, TaskResult, TaskResultDoesNotExist, TaskResultStatus, set_attr

if TYPE_CHECKING:
    from ..context import JobContext
    from ..models import Job

WORKER_LOST = "django_jobq.exceptions.WorkerLost"  # an attempt that ended without an exception
RESULT_COLUMNS = (
    "id", "task", "queue", "priority", "status", "payload", "run_at", "created_at", "started_at",
    "finished_at", "worker_id", "errors", "result",
)  # fmt: skip
_STATUS: dict[int, Any] = {
    JobStatus.PENDING: TaskResultStatus.READY, JobStatus.RUNNING: TaskResultStatus.RUNNING,
    JobStatus.DONE: TaskResultStatus.SUCCESSFUL, JobStatus.DEAD: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
    JobStatus.WAITING: TaskResultStatus.READY,  # its dependencies unfinished: not started, as READY
}  # fmt: skip


def django_task_of(entry: Any) -> Any:
    """The Django task behind a registered jobq task, or None for a native one."""
    return getattr(getattr(entry, "func", None), "django_task", None)


def get_result(alias: str, result_id: Any) -> Any:
    """The result of job ``result_id``; TaskResultDoesNotExist unless it is a Django task's job."""
    from ..models import Job
    from ..registry import resolve_task

    try:
        asked = job_id = int(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(f"no task result {result_id!r:.100}") from None
    job = None
    if 0 < job_id < 1 << 63:
        try:
            job_id = Job.objects.current_id(job_id)  # moved by jobq_queue move: where it went
            database = database_of_job(job_id)
        except UnknownShard:
            raise TaskResultDoesNotExist(f"no task result {result_id!r:.100} (no such shard)") from None
        job = Job.objects.using(database).filter(id=job_id).only(*RESULT_COLUMNS).first()
    if job is None:
        raise TaskResultDoesNotExist(f"no task result {result_id!r:.100} (unknown, or pruned)")
    task = django_task_of(resolve_task(job.task))
    if task is None:
        raise TaskResultDoesNotExist(f"job {job_id} is not a Django task's ({job.task!r:.100})")
    return result_of(job, task, alias, str(asked))


def result_of(job: Job, task: Any, alias: str, result_id: str | None = None) -> Any:
    """Django's TaskResult for a job row with RESULT_COLUMNS loaded, under ``result_id`` (the id it
    was asked by: a job moved by jobq_queue move keeps the one its caller holds), else its own."""
    status = _STATUS[job.status]
    history = [entry for entry in (job.errors or []) if isinstance(entry, dict)]
    worker_ids = [str(entry.get("worker") or "") for entry in history]
    if status in (TaskResultStatus.RUNNING, TaskResultStatus.SUCCESSFUL) and job.worker_id:
        worker_ids.append(job.worker_id)
    payload = job.payload if isinstance(job.payload, dict) else {}
    result: Any = TaskResult(
        task=_as_enqueued(task, job), id=result_id or str(job.id), status=status, enqueued_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at, last_attempted_at=job.started_at,
        args=list(payload.get("args") or []), kwargs=dict(payload.get("kwargs") or {}), backend=alias,
        errors=[_error(entry) for entry in history], worker_ids=worker_ids,
    )  # fmt: skip
    if status == TaskResultStatus.SUCCESSFUL:
        set_attr(result, "_return_value", job.result)
    return result


def running_result(task: Any, alias: str, context: JobContext) -> Any:
    """The RUNNING result a task sees in its worker. The claim's columns suffice on a first attempt;
    a later one reads the error history (the earlier attempts' workers and errors)."""
    job = context.job
    history: list[Any] = []
    if context.attempt > 1 or job.releases:
        from ..models import Job

        rows = Job.objects.using(jobq_settings().database).filter(id=job.id)
        history = rows.values_list("errors", flat=True).first() or []
    history = [entry for entry in history if isinstance(entry, dict)]
    started = job.started_at if context.attempt == job.attempts else timezone.now()
    payload = job.payload
    return TaskResult(
        task=_as_enqueued(task, job), id=str(job.id), status=TaskResultStatus.RUNNING,
        enqueued_at=job.created_at, started_at=started, finished_at=None, last_attempted_at=started,
        args=list(payload.get("args") or []), kwargs=dict(payload.get("kwargs") or {}), backend=alias,
        errors=[_error(entry) for entry in history],
        worker_ids=[*(str(entry.get("worker") or "") for entry in history), context.worker_id],
    )  # fmt: skip


def _error(entry: dict[str, Any]) -> TaskError:
    return TaskError(
        exception_class_path=str(entry.get("class") or WORKER_LOST), traceback=str(entry.get("error") or "")
    )


def _as_enqueued(task: Any, job: Job) -> Any:
    """The task as this job was enqueued: its queue, priority and run_after (when it was deferred)."""
    changes: dict[str, Any] = {}
    if job.queue != task.queue_name:
        changes["queue_name"] = job.queue
    priority = 100 - job.priority
    if priority != task.priority and -100 <= priority <= 100:
        changes["priority"] = priority
    if job.run_at is not None and job.created_at is not None and job.run_at > job.created_at:
        changes["run_after"] = job.run_at
    return replace(task, **changes) if changes else task
