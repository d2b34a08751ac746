"""JobqBackend: Django's Tasks API (``@task``, ``enqueue``, ``get_result``) on the jobq table.

Configure it the Django way::

    TASKS = {"default": {"BACKEND": "django_jobq.backend.JobqBackend", "QUEUES": ["default"]}}

A Django task is a jobq task named by its module path: the worker, the admin, retries, dead letters and
the statistics treat it like a native one. Django's priority (-100..100, higher first, default 0) maps
onto jobq's (lower first, default 100) as ``jobq priority = 100 - Django priority``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from django.core.checks import CheckMessage, Error

from .. import validation
from ..backoff import RetryPolicy
from ..exceptions import (
    ArgumentsNotJSON,
    ConfigurationError,
    DedupeKeyConflict,
    InvalidPayload,
    JobqError,
    PayloadMismatch,
    PayloadTooLarge,
    UnknownShard,
)
from ..registry import find_task
from ..tasks import _signature
from . import runner as backend_runner
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
)
from .results import get_result

if TYPE_CHECKING:
    from ..managers.producing import Enqueued

    _TaskBase = Task[..., Any]  # generic in the type stubs only
else:
    _TaskBase = Task

OPTION_KEYS = frozenset({"MAX_ATTEMPTS", "TIMEOUT"})
# Per-call options that JobqTask.using() accepts besides Django's own.
CALL_OPTIONS = (
    "max_attempts", "dedupe_key", "on_duplicate", "dedupe_done", "dedupe_dead", "concurrency_key", "tags",
    "fairness_key",
)  # fmt: skip


class InvalidJobqTask(InvalidTask, JobqError):
    """A task's jobq options are invalid, or the backend cannot run it."""


class UnknownTaskOption(InvalidJobqTask, TypeError):
    """An option the decorator or using() does not take (a TypeError, as for any unexpected keyword)."""


def jobq_priority(django_priority: int) -> int:
    """Django's priority (higher runs first, default 0) as jobq's (lower runs first, default 100)."""
    return 100 - django_priority


@dataclass(frozen=True, slots=True, kw_only=True)
class JobqTask(_TaskBase):
    """Django's Task with jobq's options; ``@task(max_attempts=10)`` (Django 6.1, the backport) or
    ``django_jobq.backend.task(...)`` (every version) sets them."""

    max_attempts: int | None = None  # None: OPTIONS["MAX_ATTEMPTS"], then JOBQ["MAX_ATTEMPTS"]
    timeout: float | None = None  # seconds; None: OPTIONS["TIMEOUT"], then JOBQ["JOB_TIMEOUT"]
    retry: RetryPolicy | None = None  # None: JOBQ's backoff and permanent exceptions
    dedupe_key: str | None = None  # one job per key (set per call with using(dedupe_key=...))
    on_duplicate: str = "skip"  # "skip" (answer the holder), "replace" or "debounce"
    dedupe_done: float | dt.timedelta | None = None
    dedupe_dead: float | dt.timedelta | None = None
    concurrency_key: str | None = None
    tags: tuple[str, ...] | None = None  # labels to find its jobs by (cancel_many, the admin)
    fairness_key: str | None = None  # the key a fair queue serves round-robin (set per call)
    max_running: int | None = None  # this task's jobs RUNNING at once, across every worker
    max_running_per_key: int | None = None
    rate_limit: str | None = None  # e.g. "10/s": starts allowed across every worker

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: dt.datetime | None = None,
        backend: str | None = None,
        **options: Any,
    ) -> JobqTask:
        """Django's using(), plus the per-call jobq options (max_attempts, dedupe_key, on_duplicate,
        dedupe_done, dedupe_dead, concurrency_key, tags, fairness_key)."""
        unknown = sorted(set(options) - set(CALL_OPTIONS))
        if unknown:
            raise UnknownTaskOption(
                f"using() got unexpected options {', '.join(unknown)} "
                f"(per call: {', '.join(CALL_OPTIONS)}; the others belong to the decorator)"
            )
        new: JobqTask = Task.using(
            self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )  # type: ignore[assignment]
        return replace(new, **options) if options else new


def task(
    function: Callable[..., Any] | None = None,
    *,
    priority: int = 0,
    queue_name: str = "default",
    backend: str = "default",
    takes_context: bool = False,
    **options: Any,
) -> Any:
    """Django's ``@task`` with jobq's options, on every supported Django version (6.0's own decorator
    does not pass options on)."""

    def wrapper(func: Callable[..., Any]) -> Any:
        task_class = task_backends[backend].task_class
        taken = {f.name for f in fields(task_class)} - {"func", "backend", "run_after", "name"}
        if unknown := sorted(set(options) - taken):
            raise UnknownTaskOption(
                f"task() got unexpected options {', '.join(unknown)} (it takes: {', '.join(sorted(taken))})"
            )
        return task_class(
            func=func, priority=priority, queue_name=queue_name, backend=backend,
            takes_context=takes_context, run_after=None, **options,
        )  # fmt: skip

    return wrapper(function) if function is not None else wrapper


class JobqBackend(BaseTaskBackend):
    task_class = JobqTask

    supports_defer = True  # run_after: the job's run_at
    supports_async_task = True  # async def tasks run on the worker slot's event loop
    supports_get_result = True  # results are the job rows, read from any process
    supports_priority = True  # mapped onto jobq's claim order (100 - priority)
    runs_on_jobq = True  # the backend runner accepts the tasks bound to this backend

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.queues_given = params.get("QUEUES")

    # -- options ----------------------------------------------------------------------------------
    @property
    def default_max_attempts(self) -> int | None:
        value = self.options.get("MAX_ATTEMPTS") if isinstance(self.options, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    @property
    def default_timeout(self) -> float | None:
        value = self.options.get("TIMEOUT") if isinstance(self.options, dict) else None
        return (
            float(value)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            else None
        )

    def check(self, **kwargs: Any) -> list[Any]:
        return [*super().check(**kwargs), *option_problems(self.alias, self.options, self.queues_given)]

    # -- tasks ------------------------------------------------------------------------------------
    def validate_task(self, task: Any) -> None:
        """Django's checks, then jobq's: the task's options and queue; registers it as a jobq task."""
        super().validate_task(task)
        try:
            if task.run_after is not None:
                validation.aware(task.run_after, "run_after")
            validation.queue(task.queue_name)
            call_options(task)
            if find_task(task.module_path) is None:
                backend_runner.register(task, self)
        except (JobqError, TypeError) as exc:
            raise InvalidJobqTask(f"{task.module_path}: {exc}") from None

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """One jobq row in the caller's transaction (NOTIFY on its commit); the result's id is the job's.
        A duplicate answers the result of the job holding the key; DedupeKeyConflict when that job is
        another task's."""
        from ..models import Job

        self.validate_task(task)  # as Django's backends do: TASKS may have changed since it was made
        name = task.module_path
        arguments: list[Any]
        keywords: dict[str, Any]
        try:  # Django's normal form of the arguments, with its TypeError for a type JSON has not
            arguments, keywords = normalize_json(list(args)), normalize_json(dict(kwargs))  # type: ignore[assignment]
        except (TypeError, ValueError) as exc:
            raise ArgumentsNotJSON(f"{name}: {exc}") from None
        _check_arguments(task, arguments, keywords)
        payload = {"args": arguments, "kwargs": keywords}
        key = getattr(task, "dedupe_key", None)
        on_duplicate = getattr(task, "on_duplicate", "skip")
        max_attempts = getattr(task, "max_attempts", None)
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": jobq_priority(task.priority),
            "run_at": task.run_after,
            "max_attempts": self.default_max_attempts if max_attempts is None else max_attempts,
            "dedupe_key": key,
            "dedupe_done": getattr(task, "dedupe_done", None),
            "dedupe_dead": getattr(task, "dedupe_dead", None),
            "concurrency_key": getattr(task, "concurrency_key", None),
            "tags": getattr(task, "tags", None),
            "fairness_key": getattr(task, "fairness_key", None),
        }
        row: Enqueued | None
        try:
            if key is not None and on_duplicate == "skip":
                row, created = Job.objects.enqueue_or_get_row(name, payload, **options)
            else:
                row, created = (
                    Job.objects.enqueue_row(name, payload, on_duplicate=on_duplicate, **options),
                    True,
                )
        except PayloadTooLarge:
            raise
        except InvalidPayload as exc:
            raise ArgumentsNotJSON(f"{name}: {exc}") from None
        if row is None or not created:  # a duplicate: the result of the job holding the key
            # (replace/debounce left a RUNNING or finished holder alone: that holder's)
            job_id = _key_holder(key, name, task.queue_name) if row is None else row.id
            result = get_result(self.alias, str(job_id))
        else:  # enqueued_at is the row's created_at, as get_result() reads it
            result = TaskResult(
                task=task, id=str(row.id), status=TaskResultStatus.READY, enqueued_at=row.created_at,
                started_at=None, finished_at=None, last_attempted_at=None, args=arguments,
                kwargs=keywords, backend=self.alias, errors=[], worker_ids=[],
            )  # fmt: skip
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The task's result from its job row; TaskResultDoesNotExist for an unknown or pruned id."""
        return get_result(self.alias, result_id)

    def cancel(self, result_id: str) -> Any:
        """Cancel the job behind a TaskResult (its ``id``): a django_jobq.CancelOutcome. A READY job
        never runs; a RUNNING one is asked to stop; its result then reads FAILED."""
        from ..models import Job

        try:
            job_id = int(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(f"no task result {result_id!r:.100}") from None
        if not 0 < job_id < 1 << 63:
            raise TaskResultDoesNotExist(f"no task result {result_id!r:.100}")
        try:
            return Job.objects.cancel(job_id, by=f"backend {self.alias}")
        except UnknownShard:
            raise TaskResultDoesNotExist(f"no task result {result_id!r:.100} (no such shard)") from None


def _check_arguments(task: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """PayloadMismatch (writing nothing) unless the arguments bind to the task's function."""
    signature = _signature(task.func)
    if signature is None:
        return
    try:
        signature.bind(*((None,) if task.takes_context else ()), *args, **kwargs)
    except TypeError as exc:
        raise PayloadMismatch(f"arguments do not fit {task.module_path}{signature}: {exc}") from None


def _key_holder(key: str | None, task: str, queue: str) -> int | None:
    """The id of the job holding dedupe key ``key`` (in ``queue``'s database), if any;
    DedupeKeyConflict when it is not a job of ``task`` (replace leaves another task's holder alone,
    and its result is not this call's)."""
    from ..models import Job
    from ..shards import database_for

    if key is None:
        return None
    holders = Job.objects.using(database_for(queue, key)).filter(dedupe_key=key, key_released=False)
    holder = holders.values_list("id", "task").first()
    if holder is None:
        return None
    if holder[1] != task:
        raise DedupeKeyConflict(key, task, holder[0], holder[1])
    return int(holder[0])


def call_options(task: Any) -> None:
    """Check the per-call jobq options a task carries (the task-level ones are checked when it is
    registered); a JobqError for the first bad one."""
    from ..managers.producing import ON_DUPLICATE

    if (attempts := getattr(task, "max_attempts", None)) is not None:
        validation.max_attempts(attempts)
    key = validation.dedupe_key(getattr(task, "dedupe_key", None))
    validation.concurrency_key(getattr(task, "concurrency_key", None))
    validation.tags(getattr(task, "tags", None))
    validation.fairness_key(getattr(task, "fairness_key", None))
    on_duplicate = getattr(task, "on_duplicate", "skip")
    if on_duplicate not in ON_DUPLICATE:
        raise ConfigurationError(
            f"on_duplicate must be one of {', '.join(ON_DUPLICATE)}, not {on_duplicate!r:.100}"
        )
    if on_duplicate != "skip" and key is None:
        raise ConfigurationError(f"on_duplicate={on_duplicate!r} needs a dedupe_key")
    for what in ("dedupe_done", "dedupe_dead"):
        if (window := getattr(task, what, None)) is not None:
            validation.seconds(window, what)


def option_problems(alias: str, options: Any, queues: Any) -> list[CheckMessage]:
    """jobq.E101-E104: the backend's OPTIONS and QUEUES (a list; empty: any queue, as in Django)."""
    where = f"TASKS[{alias!r}]"
    hint = "See docs/guide/django-tasks.md."
    if not isinstance(options, dict):
        return [
            Error(
                f"{where}['OPTIONS'] must be a dict, not {type(options).__name__}", hint=hint, id="jobq.E101"
            )
        ]
    problems: list[CheckMessage] = []
    if unknown := sorted(map(str, set(options) - OPTION_KEYS)):
        problems.append(
            Error(
                f"{where}['OPTIONS'] has unknown keys {', '.join(unknown)}",
                hint=f"Known: {', '.join(sorted(OPTION_KEYS))}.",
                id="jobq.E101",
            )
        )
    if "MAX_ATTEMPTS" in options:
        try:
            validation.max_attempts(options["MAX_ATTEMPTS"])
        except JobqError as exc:
            problems.append(Error(f"{where}['OPTIONS']['MAX_ATTEMPTS']: {exc}", hint=hint, id="jobq.E102"))
    if "TIMEOUT" in options:
        value = options["TIMEOUT"]
        try:
            if validation.seconds(value, "TIMEOUT") == 0:
                raise ConfigurationError("TIMEOUT must be positive")
        except JobqError as exc:
            problems.append(Error(f"{where}['OPTIONS']['TIMEOUT']: {exc}", hint=hint, id="jobq.E103"))
    if queues is not None:  # an empty list: any queue, as Django reads it
        names = list(queues) if isinstance(queues, list | tuple | set | frozenset) else None
        if names is None:
            problems.append(
                Error(
                    f"{where}['QUEUES'] must be a list of queue names, not {queues!r:.100}",
                    hint="List the queue names tasks may use ([] for any), or leave QUEUES out for "
                    "['default'].",
                    id="jobq.E104",
                )
            )
        else:
            for name in names:
                try:
                    validation.queue(name)
                except JobqError as exc:
                    problems.append(Error(f"{where}['QUEUES']: {exc}", hint=hint, id="jobq.E104"))
    return problems
