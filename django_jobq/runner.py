"""Running one claimed job in a worker slot: call the task, classify the failure, retry in the slot."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections
from django.utils.module_loading import import_string

from . import signals
from .backoff import RetryPolicy
from .conf import jobq_settings
from .context import JobContext
from .exceptions import InvalidPayload, JobTimeout, PermanentError
from .tasks import Task, find_task
from .validation import dump_json

if TYPE_CHECKING:
    from .models import Job

logger = logging.getLogger("django_jobq")


@dataclass(slots=True, kw_only=True)
class Outcome:
    """What happened to one job in a slot; the worker writes it to the database."""

    attempt: int  # the attempt number (fencing token) the outcome belongs to
    result_json: str | None = None  # set on success
    error: str | None = None  # set on failure
    permanent: bool = False
    backoff: float | None = None  # seconds before the retry
    duration: float = 0.0
    abandoned: bool = False  # the job is no longer ours (lost lease, or failed by the timeout watchdog)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.abandoned


def default_policy() -> RetryPolicy:
    conf = jobq_settings()
    permanent = tuple(import_string(path) for path in conf.permanent_exceptions)
    return RetryPolicy(base=conf.backoff_base, cap=conf.backoff_cap, permanent=permanent)


def format_error(exc: BaseException) -> str:
    """The exception with its traceback (no local variables, so no settings or secrets)."""
    return "".join(traceback.format_exception(exc)).rstrip()


class SlotRunner:
    """Executes jobs in one slot thread; owns the slot's event loop for ``async def`` tasks."""

    def __init__(self, worker_id: str, stopping: threading.Event, on_attempt: Callable[[int, int], bool]):
        self.worker_id = worker_id
        self.stopping = stopping
        self.on_attempt = on_attempt  # (job_id, new attempt) -> still ours?
        self._loop: asyncio.Runner | None = None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def run(self, job: Job) -> Outcome:
        close_old_connections()
        try:
            return self._run(job)
        finally:
            close_old_connections()

    def _run(self, job: Job) -> Outcome:
        task = find_task(job.task)
        if task is None:
            return Outcome(
                attempt=job.attempts, error=f"no task is registered as {job.task!r}", permanent=True
            )
        policy = task.retry or default_policy()
        conf = jobq_settings()
        attempt = job.attempts
        while True:
            started = time.monotonic()
            signals.job_started.send(sender=Task, job=job, worker_id=self.worker_id)
            try:
                value = self._call(task, job, attempt, task.timeout or conf.job_timeout)
                result = dump_json(value, what="result")
            except BaseException as exc:
                if not isinstance(exc, Exception):
                    raise  # KeyboardInterrupt/SystemExit are not job failures
                duration = time.monotonic() - started
                error = format_error(exc)
                permanent = isinstance(exc, (PermanentError, InvalidPayload, *policy.permanent))
                if permanent or attempt >= job.max_attempts:
                    return Outcome(attempt=attempt, error=error, permanent=permanent, duration=duration)
                delay = policy.delay(attempt)
                if delay > conf.short_retry_seconds:
                    return Outcome(attempt=attempt, error=error, backoff=delay, duration=duration)
                # A short delay: wait in the slot, keeping the job (the heartbeat renews its lease).
                if self.stopping.wait(delay):
                    return Outcome(attempt=attempt, error=error, backoff=0, duration=duration)
                from .models import Job as JobModel

                new_attempt = JobModel.objects.retry_in_slot(job.id, self.worker_id, attempt, error)
                if new_attempt is None or not self.on_attempt(job.id, new_attempt):
                    return Outcome(attempt=attempt, abandoned=True, duration=duration)
                logger.info(
                    "job %s (%s) attempt %s failed; retrying in the slot after %.2fs",
                    job.id, job.task, attempt, delay,
                    extra={"job_id": job.id, "task": job.task, "attempt": attempt},
                )  # fmt: skip
                signals.job_retried.send(
                    sender=Task, job=job, worker_id=self.worker_id, error=error, delay=delay
                )
                attempt = new_attempt
                continue
            return Outcome(attempt=attempt, result_json=result, duration=time.monotonic() - started)

    def _call(self, task: Task[Any, Any], job: Job, attempt: int, timeout: float | None) -> Any:
        args: tuple[Any, ...] = ()
        if task.takes_context:
            args = (
                JobContext(
                    job_id=job.id, task=job.task, attempt=attempt, max_attempts=job.max_attempts,
                    worker_id=self.worker_id,
                ),
            )  # fmt: skip
        if not task.is_async:
            return task.func(*args, **job.payload)
        if self._loop is None:
            self._loop = asyncio.Runner()
        try:
            return self._loop.run(asyncio.wait_for(task.func(*args, **job.payload), timeout))
        except TimeoutError:
            if timeout is None:
                raise
            raise JobTimeout(f"job ran longer than its timeout of {timeout}s") from None
