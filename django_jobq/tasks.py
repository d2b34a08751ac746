"""The task registry: @task registers a function under a name that jobs refer to."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Generic, ParamSpec, TypeVar, overload

from asgiref.sync import sync_to_async

from . import registry, validation
from .backoff import RetryPolicy
from .batches import Batch
from .exceptions import ConfigurationError, InvalidJob, JobFailed, PayloadMismatch
from .options import rate_setting
from .registry import capped_tasks, close_task_names, find_task, get_task, registered_tasks
from .status import JobStatus
from .workflows.compose import Signature

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "EnqueueOptions", "Task", "capped_tasks", "close_task_names", "find_task", "get_task",
    "registered_tasks", "task",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueOptions:
    """Per-call options of Task.using(); None means the task's default."""

    queue: str | None = None
    priority: int | None = None
    delay: float | dt.timedelta | None = None
    run_at: dt.datetime | None = None
    dedupe_key: str | None = None
    max_attempts: int | None = None
    dedupe_done: float | dt.timedelta | None = None
    dedupe_dead: float | dt.timedelta | None = None
    on_duplicate: str = "skip"
    concurrency_key: str | None = None
    tags: tuple[str, ...] | list[str] | None = None
    fairness_key: str | None = None
    shard_key: str | None = None  # places a job of a spread queue (docs/operations/shards.md)


@dataclass(frozen=True, slots=True, kw_only=True)
class Task(Generic[P, R]):
    """A registered function. ``enqueue(**kwargs)`` stores kwargs as the job's payload."""

    func: Callable[P, R]
    name: str
    queue: str = "default"
    priority: int = 100
    max_attempts: int | None = None  # None: JOBQ["MAX_ATTEMPTS"]
    timeout: float | None = None  # seconds; None: JOBQ["JOB_TIMEOUT"]
    retry: RetryPolicy | None = None  # None: JOBQ["BACKOFF_BASE"/"BACKOFF_CAP"/"PERMANENT_EXCEPTIONS"]
    takes_context: bool = False  # call func(context, **payload) with a JobContext
    dedupe_done: float | dt.timedelta | None = None  # None: JOBQ["DEDUPE_DONE_SECONDS"]
    dedupe_dead: float | dt.timedelta | None = None  # None: JOBQ["DEDUPE_DEAD_SECONDS"]
    atomic: bool = False  # run in one transaction with the job's DONE write (database-only tasks)
    max_running: int | None = None  # this task's jobs RUNNING at once, across every worker
    max_running_per_key: int | None = None  # ... and per concurrency_key (jobs enqueued with one)
    rate_limit: tuple[int, float] | None = None  # (jobs, seconds): starts allowed across every worker
    # exceptions that end the job CANCELLED at once (no retry, no dead letter), besides
    # JOBQ["DISCARD_ON"]: e.g. (ObjectDoesNotExist,) for work whose object was deleted meanwhile
    discard_on: tuple[type[BaseException], ...] = ()
    batch: Batch | None = None  # called with a list of jobs (django_jobq.batches)
    options: EnqueueOptions = field(default_factory=EnqueueOptions)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    def features(self) -> list[tuple[str, str]]:
        """The (engine capability, option) pairs this task's options need (sql/capabilities.py)."""
        needs = []
        if self.max_running is not None or self.max_running_per_key is not None:
            needs.append(("task_caps", "max_running"))
        if self.rate_limit is not None:
            needs.append(("rate_limits", "rate_limit"))
        return needs

    def check_call(self, payload: Any, context: Any = None) -> None:
        """PayloadMismatch unless ``payload`` is a JSON object whose keys bind to the function's
        parameters (after the context, for a task that takes one)."""
        if not isinstance(payload, dict):
            raise PayloadMismatch(
                f"payload must be a JSON object, not {type(payload).__name__}: {payload!r:.200}"
            )
        if self.batch is not None:  # the function takes the batch; a payload is any JSON object
            return
        if (problem := _binding_problem(self.func, int(self.takes_context), tuple(payload))) is not None:
            raise PayloadMismatch(f"payload does not fit {self.name}{_signature(self.func)}: {problem}")

    def s(self, **kwargs: Any) -> Signature:
        """A signature: this task with ``kwargs`` as one job's arguments, for a workflow
        (``chain(charge.s(order_id=1), send_receipt.s(order_id=1))``), with using()'s options."""
        options = self._call_options()
        if options["dedupe_key"] is not None:
            raise InvalidJob("a workflow's jobs take no dedupe key")
        if options["delay"] is not None:
            raise InvalidJob("a workflow's job takes run_at, not delay")
        if options["shard_key"] is not None:
            raise InvalidJob("a workflow's jobs take no shard_key: they share the workflow's database")
        return Signature(
            self.name, kwargs, queue=options["queue"], priority=options["priority"], run_at=options["run_at"],
            max_attempts=options["max_attempts"], concurrency_key=options["concurrency_key"],
            tags=options["tags"],
        )  # fmt: skip

    def using(self, **options: Any) -> Task[P, R]:
        """A copy whose next enqueue uses these options (queue, priority, delay, run_at, dedupe_key, ...)."""
        return replace(self, options=replace(self.options, **options))

    def _call_options(self) -> dict[str, Any]:
        o = self.options
        return {
            "queue": self.queue if o.queue is None else o.queue,
            "priority": self.priority if o.priority is None else o.priority,
            "delay": o.delay,
            "run_at": o.run_at,
            "dedupe_key": o.dedupe_key,
            "max_attempts": self.max_attempts if o.max_attempts is None else o.max_attempts,
            "dedupe_done": o.dedupe_done,
            "dedupe_dead": o.dedupe_dead,
            "concurrency_key": o.concurrency_key,
            "tags": o.tags,
            "fairness_key": o.fairness_key,
            "shard_key": o.shard_key,
        }

    def enqueue(self, **kwargs: Any) -> int | None:
        """Put a job for this task; returns its id, or None when a duplicate blocked it."""
        from .models import Job

        return Job.objects.enqueue(
            self.name, kwargs, **self._call_options(), on_duplicate=self.options.on_duplicate
        )

    async def aenqueue(self, **kwargs: Any) -> int | None:
        return await sync_to_async(self.enqueue)(**kwargs)

    def run_once(self, *, timeout: float, **kwargs: Any) -> Any:
        """Single-flight: run this task once per dedupe key (set with ``using(dedupe_key=...)``) and
        return its result; concurrent callers with the same key share one run, and a DONE job inside
        its window answers without a run. JobFailed when the job went DEAD, WaitTimeout at
        ``timeout`` seconds. Not inside a transaction: the job could not start before it commits."""
        from .models import Job

        return _answer(Job.objects.wait_for(self._enqueue_once(kwargs), timeout=timeout))

    async def arun_once(self, *, timeout: float, **kwargs: Any) -> Any:
        from .models import Job

        job_id = await sync_to_async(self._enqueue_once)(kwargs)
        return _answer(await Job.objects.await_for(job_id, timeout=timeout))

    def _enqueue_once(self, payload: dict[str, Any]) -> int:
        """The id of the job holding this call's dedupe key (enqueued by this call if none did)."""
        from django.db import connections

        from .conf import jobq_settings
        from .exceptions import InvalidJob
        from .models import Job

        if self.options.dedupe_key is None:
            raise InvalidJob("run_once needs a dedupe key: task.using(dedupe_key=...).run_once(...)")
        if connections[jobq_settings().database].in_atomic_block:
            raise InvalidJob(
                "run_once cannot wait inside a transaction: the job starts only after it commits"
            )
        return Job.objects.enqueue_or_get(self.name, payload, **self._call_options())[0]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)


@overload
def task(func: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    queue: str = "default",
    priority: int = 100,
    max_attempts: int | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    takes_context: bool = False,
    dedupe_done: float | dt.timedelta | None = None,
    dedupe_dead: float | dt.timedelta | None = None,
    atomic: bool = False,
    max_running: int | None = None,
    max_running_per_key: int | None = None,
    rate_limit: str | None = None,
    discard_on: tuple[type[BaseException], ...] = (),
    batch: Batch | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str = "default",
    priority: int = 100,
    max_attempts: int | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    takes_context: bool = False,
    dedupe_done: float | dt.timedelta | None = None,
    dedupe_dead: float | dt.timedelta | None = None,
    atomic: bool = False,
    max_running: int | None = None,
    max_running_per_key: int | None = None,
    rate_limit: str | None = None,
    discard_on: tuple[type[BaseException], ...] = (),
    batch: Batch | None = None,
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """Register ``func`` as a task: ``@task`` or ``@task(name=..., queue=..., ...)``."""

    def register(func: Callable[P, R]) -> Task[P, R]:
        task_name = validation.name(name or f"{func.__module__}.{func.__qualname__}", "task name")
        validation.queue(queue)
        validation.priority(priority)
        if max_attempts is not None:
            validation.max_attempts(max_attempts)
        if timeout is not None and validation.seconds(timeout, "timeout") == 0:
            raise ConfigurationError("timeout must be positive")
        for window, what in ((dedupe_done, "dedupe_done"), (dedupe_dead, "dedupe_dead")):
            if window is not None:
                validation.seconds(window, what)
        if not isinstance(atomic, bool):
            raise ConfigurationError(f"atomic must be True or False, not {atomic!r}")
        for cap, what in ((max_running, "max_running"), (max_running_per_key, "max_running_per_key")):
            if cap is not None and (
                not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= 1_000_000
            ):
                raise ConfigurationError(f"{what} must be an integer in [1, 1000000], not {cap!r:.100}")
        rate = None if rate_limit is None else rate_setting(rate_limit, f"task {task_name!r}: rate_limit")
        discards = discard_on if isinstance(discard_on, tuple) else (discard_on,)
        if not all(isinstance(kind, type) and issubclass(kind, BaseException) for kind in discards):
            raise ConfigurationError(f"discard_on must be exception classes, not {discard_on!r:.100}")
        if atomic and inspect.iscoroutinefunction(func):
            raise ConfigurationError("atomic=True needs a sync function: Django transactions are per thread")
        _check_batch(
            batch, atomic=atomic, takes_context=takes_context, capped=(max_running, max_running_per_key)
        )
        new = Task(
            func=func,
            name=task_name,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            timeout=timeout,
            retry=retry,
            takes_context=takes_context,
            dedupe_done=dedupe_done,
            dedupe_dead=dedupe_dead,
            atomic=atomic,
            max_running=max_running,
            max_running_per_key=max_running_per_key,
            rate_limit=rate,
            discard_on=discards,
            batch=batch,
        )
        return registry.register(new)

    return register(func) if func is not None else register


def _check_batch(batch: Any, *, atomic: bool, takes_context: bool, capped: tuple[int | None, ...]) -> None:
    """ConfigurationError for a batch option a batch task cannot have."""
    if batch is None:
        return
    if not isinstance(batch, Batch):
        raise ConfigurationError(f"batch must be a django_jobq.Batch, not {batch!r:.100}")
    if atomic:
        raise ConfigurationError(
            "a batch task cannot be atomic: its jobs end one by one, not in one transaction"
        )
    if takes_context:
        raise ConfigurationError("a batch task takes no context: each BatchJob carries its own (job.context)")
    if any(cap is not None for cap in capped):
        raise ConfigurationError(
            "a batch task takes no max_running or max_running_per_key: bound its calls with the batch size, "
            'its lane\'s slots or its queue\'s JOBQ["QUEUES"][...]["MAX_RUNNING"] (which counts every job)'
        )


@functools.lru_cache(maxsize=4096)
def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):  # some callables have none: let the call decide
        return None


@functools.lru_cache(maxsize=4096)
def _binding_problem(func: Callable[..., Any], positional: int, names: tuple[str, ...]) -> str | None:
    """Why ``positional`` arguments (a context counts as one) and keyword arguments ``names`` do not
    bind to ``func``, or None when they do. Binding depends on the count and the names alone, so a
    task's usual payload shape is checked once."""
    signature = _signature(func)
    if signature is None:
        return None
    try:
        signature.bind(*(None,) * positional, **dict.fromkeys(names))
    except TypeError as exc:
        return str(exc)
    return None


def _answer(job: Any) -> Any:
    """A finished job's result; JobFailed for a DEAD or CANCELLED one."""
    if job.status in (JobStatus.DEAD, JobStatus.CANCELLED):
        raise JobFailed(job)
    return job.result
