"""Asserting what a test enqueued: jobs found by task and by a subset of their arguments."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..registry import resolve_task
from ..status import JobStatus
from .runner import task_name

if TYPE_CHECKING:
    from ..models import Job


def _is_django_task(task: Any) -> bool:
    """Whether ``task`` is a Django Tasks task (arguments stored as {"args": [...], "kwargs": {...}})."""
    from ..tasks import Task

    if isinstance(task, Task):
        return False
    if isinstance(task, str):
        found = resolve_task(task)
        return found is not None and isinstance(getattr(found.func, "jobq_origin", None), str)
    return True


def _matches(payload: Any, django_task: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if django_task:
        if not isinstance(payload, dict):
            return False
        stored_args, stored_kwargs = payload.get("args", []), payload.get("kwargs", {})
        if args and list(args) != stored_args[: len(args)]:
            return False
    else:
        if args:
            raise TypeError("a django-jobq task takes keyword arguments only")
        stored_kwargs = payload
    if not isinstance(stored_kwargs, dict):
        return False
    return all(key in stored_kwargs and stored_kwargs[key] == value for key, value in kwargs.items())


def enqueued(
    task: Any = None,
    *,
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    status: JobStatus | None = None,
    tags: list[str] | None = None,
) -> list[Job]:
    """The jobs in the queue's table, oldest first: of ``task`` (a task or its name), whose stored
    arguments start with ``args`` and include ``kwargs`` (each value equal, after the JSON round trip),
    in ``queue``, in ``status`` (any by default: a drained job still counts), carrying every tag."""
    from ..conf import jobq_settings
    from ..models import Job

    rows = Job.objects.using(jobq_settings().database).order_by("id")
    if task is not None:
        rows = rows.filter(task=task_name(task))
    if queue is not None:
        rows = rows.filter(queue=queue)
    if status is not None:
        rows = rows.filter(status=status)
    django_task = task is not None and _is_django_task(task)
    found = [job for job in rows if _matches(job.payload, django_task, tuple(args), kwargs or {})]
    if tags:
        found = [job for job in found if set(tags) <= set(job.tags or [])]
    return found


def _describe(task: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    shown = [*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())]
    return f"{task_name(task)}({', '.join(shown)})"


def assert_enqueued(task: Any, /, *args: Any, **kwargs: Any) -> Job:
    """The latest job of ``task`` whose arguments start with ``args`` and include ``kwargs``;
    AssertionError listing the task's jobs when there is none."""
    found = enqueued(task, args=args, kwargs=kwargs)
    if not found:
        others = enqueued(task)
        listed = "\n".join(f"  job {job.id}: {job.payload!r:.200}" for job in others[-10:]) or "  (none)"
        raise AssertionError(
            f"no job {_describe(task, args, kwargs)} was enqueued; the task's jobs:\n{listed}"
        )
    return found[-1]


def assert_not_enqueued(task: Any, /, *args: Any, **kwargs: Any) -> None:
    """AssertionError when a job of ``task`` whose arguments start with ``args`` and include ``kwargs``
    was enqueued."""
    found = enqueued(task, args=args, kwargs=kwargs)
    if found:
        ids = ", ".join(str(job.id) for job in found[:10])
        raise AssertionError(f"{len(found)} job(s) {_describe(task, args, kwargs)} were enqueued: {ids}")
