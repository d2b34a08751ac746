"""Running one claimed job in a worker slot: check the call, call the task, classify the failure, retry
in the slot. Whatever the job does, the slot gets an Outcome back, never an exception."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from django.db import Error as DatabaseError
from django.db import close_old_connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from .. import signals, validation
from ..backoff import RetryPolicy
from ..conf import jobq_settings
from ..context import CancelSignal, JobContext
from ..exceptions import InvalidPayload, JobTimeout, PermanentError, RateLimitUnavailable, UnknownTask
from ..managers import result_json
from ..outcomes import Cancelled, Discard, Snooze
from ..ratelimit import TokenBucket
from ..registry import resolve_task
from ..status import JobStatus
from ..tasks import Task
from . import middleware

if TYPE_CHECKING:
    from ..models import Job
    from .lanes import Running

logger = logging.getLogger("django_jobq")

# (new attempt, new fence) -> still ours?  Called after an in-slot retry committed.
OnAttempt = Callable[[int, int], bool]
# Runs a progress or lease write on the worker's own connection (see SideWriter).
SideWrite = Callable[[Callable[[], bool]], bool]
# Waits the given seconds before an in-slot retry: None to retry in the slot, or the seconds still to
# wait when the retry should go back to the queue instead (the slot is wanted, or the worker stops).
RetryWait = Callable[[float], float | None]


@dataclass(slots=True, kw_only=True)
class Outcome:
    """What happened to one job in a slot; the worker writes it to the database."""

    fence: int  # the fencing token of the run the outcome belongs to
    attempt: int  # that run's attempt number (for logs and signals)
    result_json: str | None = None  # set on success
    error: str | None = None  # set on failure
    error_class: str | None = None  # the exception's class path, when an exception failed the run
    permanent: bool = False
    backoff: float | None = None  # seconds before the retry
    duration: float = 0.0
    abandoned: bool = False  # the job is no longer ours (lost lease, or failed by the timeout watchdog)
    committed: bool = False  # DONE is already written, in the task's own transaction (atomic=True)
    # no rate-limit permit, or the task raised Snooze: back to PENDING for this many seconds, no
    # attempt used
    snooze: float | None = None
    snoozed: bool = False  # the task raised Snooze (counted against JOBQ["MAX_SNOOZES"])
    discard: bool = (
        False  # end CANCELLED: the task raised Discard or a discard_on exception, or was cancelled
    )
    unknown_task: bool = False  # no task of the job's name here: given back (snooze) for a worker that has it

    @property
    def ok(self) -> bool:
        return self.error is None and not self.abandoned and self.snooze is None


def timeout_outcome(entry: Running, duration: float = 0.0) -> Outcome:
    """The failure of a run that went past its timeout (retried, or DEAD at its last attempt)."""
    exc = JobTimeout(f"job {entry.job.id} ran past its timeout of {entry.timeout}s")
    return Outcome(
        fence=entry.fence, attempt=entry.attempt, error=format_error(exc), error_class=class_path(exc),
        duration=duration,
    )  # fmt: skip


UNKNOWN_TASK_DELAYS = (
    1.0,
    60.0,
)  # a job of an unknown task is given back for this long: 10% of its age, within


def unknown_task_outcome(job: Job, fence: int, attempt: int) -> Outcome:
    """A job of a task this worker does not know (a newer deployment enqueued it, this worker runs
    older code): given back without using an attempt, due again after a tenth of its age (1 s to a
    minute), for a worker that knows it; DEAD once it has waited JOBQ["UNKNOWN_TASK_GRACE"] since its
    enqueue."""
    grace = jobq_settings().unknown_task_grace
    age = 0.0 if job.created_at is None else max(0.0, (timezone.now() - job.created_at).total_seconds())
    if age >= grace:
        error = (
            f"no task is registered as {job.task!r} on the workers that claimed it within "
            f'JOBQ["UNKNOWN_TASK_GRACE"] ({grace:g}s) of its enqueue'
        )
        return Outcome(fence=fence, attempt=attempt, error=error, error_class=class_path(UnknownTask()),
                       permanent=True)  # fmt: skip
    low, high = UNKNOWN_TASK_DELAYS
    return Outcome(fence=fence, attempt=attempt, snooze=min(high, max(low, age / 10)), unknown_task=True)


class StaleRun(Exception):
    """An atomic task's DONE write found the run no longer ours: its transaction must roll back."""


class CancelledRun(Exception):
    """An atomic task's DONE write found a cancel asked of its run: its transaction (the task's work
    and that write) rolls back, and the run ends CANCELLED."""


def permit_wait(
    task: Task[Any, Any], queue: str, *, permitted: bool = False, task_permitted: bool = False
) -> float | None:
    """None when the task's and the queue's rate limits (if any) grant a start now; otherwise the
    seconds until the next permit is expected (one permit's interval). ``permitted``,
    ``task_permitted``: the queue's, the task's permit was taken with the claim (worker/rationing.py).
    Without the database the limit fails closed: no start, try again after JOBQ["POLL_INTERVAL"]."""
    conf = jobq_settings()
    options = None if permitted else conf.queues.get(queue)
    queue_rate = options.rate_limit if options is not None else None
    task_rate = None if task_permitted else task.rate_limit
    if task_rate is None and queue_rate is None:
        return None
    for key, rate in ((f"jobq:task:{task.name}", task_rate), (f"jobq:queue:{queue}", queue_rate)):
        if rate is None:
            continue
        count, seconds = rate
        try:
            if not TokenBucket(key, count, seconds, count).acquire():
                return seconds / count
        except RateLimitUnavailable as exc:
            logger.warning("rate limit %s unavailable (%s): the job waits", key, exc)
            return conf.poll_interval
    return None


def default_policy() -> RetryPolicy:
    conf = jobq_settings()
    permanent = tuple(import_string(path) for path in conf.permanent_exceptions)
    return RetryPolicy(base=conf.backoff_base, cap=conf.backoff_cap, permanent=permanent)


def discarded_by(task: Task[Any, Any]) -> tuple[type[BaseException], ...]:
    """The exceptions that end the task's job CANCELLED: Discard, its discard_on, JOBQ["DISCARD_ON"]."""
    return (Discard, *task.discard_on, *middleware.imported(jobq_settings().discard_on))


def class_path(exc: BaseException) -> str:
    """The exception's class as an importable path (stored with each failed attempt)."""
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


# The code between a slot and the task's function: its frames are left out of a stored traceback.
_CALLERS = (
    *(str(Path(__file__).with_name(name)) for name in ("runner.py", "middleware.py")),
    str(Path(__file__).parent.parent / "backend" / "runner.py"),
    str(Path(asyncio.__file__).parent) + os.sep,  # the slot's event loop, for an async task
)


def format_error(exc: BaseException) -> str:
    """The exception with its traceback (no local variables, so no settings or secrets), as it is
    stored and logged: from the task's call (a middleware's, if any), as Python prints it, NUL and
    lone surrogates escaped, cut to the stored length."""
    try:
        text = "".join(traceback.format_exception(type(exc), exc, _from_the_call(exc.__traceback__)))
        return validation.error_text(text)
    except Exception:  # a hostile __str__ or traceback
        return f"{type(exc).__module__}.{type(exc).__qualname__} (its message could not be formatted)"


def _from_the_call(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the slot's and the event loop's frames on top: from the first frame of other
    code (the task's, or a middleware's); all of it when nothing else is in it (a failure of the run
    itself, e.g. its payload's check)."""
    first = tb
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_CALLERS):
        tb = tb.tb_next
    return first if tb is None else tb


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
        policy = task.retry or default_policy()
        discards = discarded_by(task)
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
            except Snooze as exc:
                duration = time.monotonic() - started
                if (job.snoozes or 0) < conf.max_snoozes:
                    return Outcome(
                        fence=fence, attempt=attempt, snooze=exc.seconds, snoozed=True, duration=duration
                    )
                error = f"the task raised Snooze more than JOBQ['MAX_SNOOZES'] ({conf.max_snoozes}) times"
                return Outcome(
                    fence=fence, attempt=attempt, error=error, error_class=class_path(exc), duration=duration,
                    backoff=policy.delay(attempt) if attempt < job.max_attempts else None,
                )  # fmt: skip
            except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the task's, never the slot's
                duration = time.monotonic() - started
                error, error_class = format_error(exc), class_path(exc)
                if cancel.is_set() or isinstance(exc, (Cancelled, *discards)):
                    # a Discard's reason, or the plain fact of the cancel; any other exception's traceback
                    reason = exc.reason if isinstance(exc, Discard) else error
                    if isinstance(exc, Cancelled):
                        reason = f"{exc}; the run stopped"
                    return Outcome(
                        fence=fence, attempt=attempt, error=reason, error_class=error_class, discard=True,
                        duration=duration,
                    )  # fmt: skip
                permanent = isinstance(exc, (PermanentError, InvalidPayload, *policy.permanent))
                if permanent or attempt >= job.max_attempts:
                    return Outcome(
                        fence=fence,
                        attempt=attempt,
                        error=error,
                        error_class=error_class,
                        permanent=permanent,
                        duration=duration,
                    )
                delay = policy.delay(attempt)
                if delay > conf.short_retry_seconds:
                    return Outcome(
                        fence=fence,
                        attempt=attempt,
                        error=error,
                        error_class=error_class,
                        backoff=delay,
                        duration=duration,
                    )
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
        context = self._context(job, fence, attempt, cancel) if task.takes_context or chain else None
        args: tuple[Any, ...] = (context,) if task.takes_context else ()
        task.check_call(job.payload, *args)
        if not task.is_async:
            call = functools.partial(task.func, *args, **job.payload)
            return middleware.run_sync(chain, job, context, call) if chain else call()
        if self._loop is None:
            self._loop = asyncio.Runner()
        coroutine = functools.partial(task.func, *args, **job.payload)
        main = middleware.run_async(chain, job, context, coroutine) if chain else coroutine()
        try:
            return self._loop.run(_cancellable(main, timeout, cancel))
        except TimeoutError:
            if timeout is None:
                raise
            raise JobTimeout(f"job ran longer than its timeout of {timeout}s") from None
        except asyncio.CancelledError:
            if cancel.is_set():
                raise Cancelled(f"job {job.id} was cancelled") from None
            raise

    def _context(self, job: Job, fence: int, attempt: int, cancel: CancelSignal) -> JobContext:
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
