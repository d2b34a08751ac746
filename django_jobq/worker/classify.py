"""What a run in a worker slot ends with (Outcome), and how a failure is classified: a snooze, a
cancel, a retry after the task's backoff, or the dead letters; also the rate-limit check before a start
and the stored form of an exception."""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.module_loading import import_string

from .. import validation
from ..backoff import RetryPolicy
from ..conf import jobq_settings
from ..exceptions import InvalidPayload, JobTimeout, PermanentError, RateLimitUnavailable, UnknownTask
from ..outcomes import Cancelled, Discard, Snooze
from ..ratelimit import TokenBucket
from ..tasks import Task
from . import middleware

if TYPE_CHECKING:
    from ..models import Job
    from .lanes import Running

logger = logging.getLogger("django_jobq")


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
    *(str(Path(__file__).with_name(name)) for name in ("runner.py", "batch_runner.py", "middleware.py")),
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


def outcome_of(
    exc: BaseException, job: Job, fence: int, attempt: int, policy: RetryPolicy,
    discards: tuple[type[BaseException], ...], cancelled: bool, duration: float,
) -> Outcome:  # fmt: skip
    """What an exception ends a run with: a snooze (Snooze, within JOBQ["MAX_SNOOZES"]); CANCELLED (a
    cancel was asked, Cancelled, Discard or a discard_on exception); DEAD (a permanent error, or the
    last attempt); else a retry after the policy's backoff."""
    conf = jobq_settings()
    if isinstance(exc, Snooze):
        if (job.snoozes or 0) < conf.max_snoozes:
            return Outcome(fence=fence, attempt=attempt, snooze=exc.seconds, snoozed=True, duration=duration)
        error = f"the task raised Snooze more than JOBQ['MAX_SNOOZES'] ({conf.max_snoozes}) times"
        return Outcome(
            fence=fence, attempt=attempt, error=error, error_class=class_path(exc), duration=duration,
            backoff=policy.delay(attempt) if attempt < job.max_attempts else None,
        )  # fmt: skip
    error, error_class = format_error(exc), class_path(exc)
    if cancelled or isinstance(exc, (Cancelled, *discards)):
        # a Discard's reason, or the plain fact of the cancel; any other exception's traceback
        reason = exc.reason if isinstance(exc, Discard) else error
        if isinstance(exc, Cancelled):
            reason = f"{exc}; the run stopped"
        return Outcome(
            fence=fence,
            attempt=attempt,
            error=reason,
            error_class=error_class,
            discard=True,
            duration=duration,
        )
    permanent = isinstance(exc, (PermanentError, InvalidPayload, *policy.permanent))
    if permanent or attempt >= job.max_attempts:
        return Outcome(
            fence=fence, attempt=attempt, error=error, error_class=error_class, permanent=permanent,
            duration=duration,
        )  # fmt: skip
    return Outcome(
        fence=fence, attempt=attempt, error=error, error_class=error_class, backoff=policy.delay(attempt),
        duration=duration,
    )  # fmt: skip
