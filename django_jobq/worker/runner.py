"""Running one claimed job in a worker slot: check the call, call the task, classify the failure
(classify.py), retry in the slot. Whatever the job does, the slot gets an Outcome back, never an exception."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import Error as DatabaseError
from django.db import close_old_connections, transaction

from .. import signals
from ..conf import jobq_settings
from ..context import CancelSignal, JobContext
from ..database_context import home_context
from ..exceptions import JobTimeout
from ..managers import result_json
from ..outcomes import Cancelled, Snooze
from ..registry import resolve_task
from ..status import JobStatus
from ..tasks import Task
from . import middleware
from .classify import (
    Outcome,
    class_path,
    default_policy,
    discarded_by,
    format_error,
    outcome_of,
    permit_wait,
    unknown_task_outcome,
)

if TYPE_CHECKING:
    from ..models import Job

logger = logging.getLogger("django_jobq")

# (new attempt, new fence) -> still ours?  Called after an in-slot retry committed.
OnAttempt = Callable[[int, int], bool]
# Runs a progress or lease write on the worker's own connection (see SideWriter).
SideWrite = Callable[[Callable[[], bool]], bool]
# Waits the given seconds before an in-slot retry: None to retry in the slot, or the seconds still to
# wait when the retry should go back to the queue instead (the slot is wanted, or the worker stops).
RetryWait = Callable[[float], float | None]


class StaleRun(Exception):
    """An atomic task's DONE write found the run no longer ours: its transaction must roll back."""


class CancelledRun(Exception):
    """An atomic task's DONE write found a cancel asked of its run: its transaction (the task's work
    and that write) rolls back, and the run ends CANCELLED."""


class SlotRunner:
    """Executes jobs in one slot thread; owns the slot's event loop for ``async def`` tasks.

    ``own_connections``: close this thread's stale connections around each run, as a worker's slot
    does; False runs on the caller's connection as it is (django_jobq.testing, inside a test's
    transaction)."""

    def __init__(
        self,
        worker_id: str,
        stopping: threading.Event,
        side_write: SideWrite | None = None,
        wait_to_retry: RetryWait | None = None,
        *,
        own_connections: bool = True,
    ):
        self.worker_id = worker_id
        self.stopping = stopping
        self.side_write = side_write
        self.wait_to_retry = wait_to_retry or self._wait_unless_stopping
        self.own_connections = own_connections
        self._loop: asyncio.Runner | None = None

    def _wait_unless_stopping(self, delay: float) -> float | None:
        return 0.0 if self.stopping.wait(delay) else None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def run(
        self, job: Job, fence: int, attempt: int, on_attempt: OnAttempt, cancel: CancelSignal | None = None,
        *, permitted: bool = False, task_permitted: bool = False,
    ) -> Outcome:  # fmt: skip
        """``permitted``, ``task_permitted``: the job was claimed with its queue's, its task's
        rate-limit permit (its first start takes none; a retry in the slot does)."""
        if self.own_connections:
            close_old_connections()
        try:
            return self._run(
                job, fence, attempt, on_attempt, cancel or CancelSignal(), (permitted, task_permitted)
            )
        except Exception as exc:  # never let a job end the slot: a failure like any other, retried
            return Outcome(fence=fence, attempt=attempt, error=format_error(exc), error_class=class_path(exc))
        finally:
            if self.own_connections:
                close_old_connections()

    def _run(
        self, job: Job, fence: int, attempt: int, on_attempt: OnAttempt, cancel: CancelSignal,
        permits: tuple[bool, bool],
    ) -> Outcome:  # fmt: skip
        task = resolve_task(job.task)
        if task is None:
            return unknown_task_outcome(job, fence, attempt)
        conf = jobq_settings()
        while True:
            if cancel.is_set():  # asked before this attempt started: it never does
                return Outcome(
                    fence=fence, attempt=attempt, error="cancelled before it started", discard=True
                )
            wait = permit_wait(task, job.queue, permitted=permits[0], task_permitted=permits[1])
            if wait is not None:
                return Outcome(fence=fence, attempt=attempt, snooze=wait)
            permits = (False, False)  # a retry in the slot takes permits of its own
            started = time.monotonic()
            signals.send(signals.job_started, job=job, worker_id=self.worker_id)
            try:
                if task.atomic:
                    result = self._call_atomic(task, job, fence, attempt, cancel)
                else:
                    result = result_json(
                        self._call(task, job, fence, attempt, task.timeout or conf.job_timeout, cancel)
                    )
            except StaleRun:
                return Outcome(
                    fence=fence, attempt=attempt, abandoned=True, duration=time.monotonic() - started
                )
            except CancelledRun as exc:  # an atomic task's work rolled back: the run ends CANCELLED
                return Outcome(
                    fence=fence, attempt=attempt, error=str(exc), discard=True,
                    duration=time.monotonic() - started,
                )  # fmt: skip
            except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the task's, never the slot's
                duration = time.monotonic() - started
                policy = task.retry or default_policy()
                failed = outcome_of(
                    exc, job, fence, attempt, policy, discarded_by(task), cancel.is_set(), duration
                )
                if (
                    isinstance(exc, Snooze)
                    or failed.backoff is None
                    or failed.backoff > conf.short_retry_seconds
                ):
                    return failed
                error, error_class, delay = failed.error or "", failed.error_class, failed.backoff
                # A short delay: wait in the slot, keeping the job (the heartbeat renews its lease),
                # while the lane has nothing else due. Stopping meanwhile, other work due, or the
                # database away: this attempt fails the usual way, its retry due when the wait would end.
                if (left := self.wait_to_retry(delay)) is not None:
                    return Outcome(
                        fence=fence, attempt=attempt, error=error, error_class=error_class, backoff=left,
                        duration=duration,
                    )  # fmt: skip
                retry_now = Outcome(
                    fence=fence, attempt=attempt, error=error, error_class=error_class, backoff=0,
                    duration=duration,
                )  # fmt: skip
                from ..models import Job as JobModel

                try:
                    renewed = JobModel.objects.retry_in_slot(
                        job.id, self.worker_id, fence, error, error_class=error_class
                    )
                except DatabaseError:
                    return retry_now
                if renewed is None:  # a cancel was asked (FAIL ends it CANCELLED), or no longer ours
                    return retry_now
                if not on_attempt(*renewed):
                    return Outcome(fence=fence, attempt=attempt, abandoned=True, duration=duration)
                logger.info(
                    "job %s (%s) attempt %s failed; retrying in the slot after %.2fs",
                    job.id, job.task, attempt, delay,
                    extra={"job_id": job.id, "task": job.task, "attempt": attempt},
                )  # fmt: skip
                signals.send(signals.job_retried, job=job, worker_id=self.worker_id, error=error, delay=delay)
                attempt, fence = renewed
                continue
            if cancel.is_set() and not task.atomic:  # asked while it ran: its result is discarded
                return Outcome(
                    fence=fence, attempt=attempt, error="cancelled while it ran; its result was discarded",
                    discard=True, duration=time.monotonic() - started,
                )  # fmt: skip
            return Outcome(
                fence=fence, attempt=attempt, result_json=result, duration=time.monotonic() - started,
                committed=task.atomic,
            )  # fmt: skip

    def _call_atomic(
        self, task: Task[Any, Any], job: Job, fence: int, attempt: int, cancel: CancelSignal
    ) -> str:
        """Run the task and write its DONE in one transaction on the queue's database, fenced by this
        run's token: a crash before the commit leaves neither the task's writes nor DONE, and a run
        that lost the job (its lease expired, another worker holds it) rolls its writes back."""
        from ..models import Job as JobModel

        with transaction.atomic(using=jobq_settings().database):
            result = result_json(self._call(task, job, fence, attempt, None, cancel))
            status = JobModel.objects.complete_json(job.id, self.worker_id, result, fence=fence)
            if status is None:
                raise StaleRun(f"job {job.id}: run {fence} no longer owns the job")
            if status != JobStatus.DONE:
                raise CancelledRun("cancelled while it ran; its transaction was rolled back")
        return result

    def _call(
        self, task: Task[Any, Any], job: Job, fence: int, attempt: int, timeout: float | None,
        cancel: CancelSignal,
    ) -> Any:  # fmt: skip
        chain = middleware.layers()
        context = self.context(job, fence, attempt, cancel) if task.takes_context or chain else None
        args: tuple[Any, ...] = (context,) if task.takes_context else ()
        task.check_call(job.payload, *args)
        if not task.is_async:  # the task's own code runs on the home context (conf.home_context)
            call = functools.partial(task.func, *args, **job.payload)
            return home_context().run(
                lambda: middleware.run_sync(chain, job, context, call) if chain else call()
            )
        coroutine = functools.partial(task.func, *args, **job.payload)
        main = middleware.run_async(chain, job, context, coroutine) if chain else coroutine()
        try:
            return self.event_loop().run(_cancellable(main, timeout, cancel), context=home_context())
        except TimeoutError:
            if timeout is None:
                raise
            raise JobTimeout(f"job ran longer than its timeout of {timeout}s") from None
        except asyncio.CancelledError:
            if cancel.is_set():
                raise Cancelled(f"job {job.id} was cancelled") from None
            raise

    def event_loop(self) -> asyncio.Runner:
        """The slot's event loop, for ``async def`` tasks (made on first use)."""
        if self._loop is None:
            self._loop = asyncio.Runner()
        return self._loop

    def context(self, job: Job, fence: int, attempt: int, cancel: CancelSignal) -> JobContext:
        return JobContext(
            job_id=job.id, task=job.task, attempt=attempt, max_attempts=job.max_attempts,
            worker_id=self.worker_id, fence=fence, side_write=self.side_write, dedupe_key=job.dedupe_key,
            job=job, cancelled=cancel.event,
        )  # fmt: skip


async def _cancellable(coro: Any, timeout: float | None, cancel: CancelSignal) -> Any:
    """Await ``coro`` within ``timeout``; a cancel asked meanwhile cancels it (asyncio cancellation,
    from the heartbeat's thread)."""
    running = asyncio.ensure_future(asyncio.wait_for(coro, timeout))
    loop = asyncio.get_running_loop()
    forget = cancel.on_set(lambda: loop.call_soon_threadsafe(running.cancel))
    try:
        return await running
    finally:
        forget()
