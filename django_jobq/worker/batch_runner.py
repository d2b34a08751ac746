"""Running a batch task's jobs in one call: each job's outcome from the call's answer for it (a result,
an exception), or from the exception that escaped the whole call (one failed attempt for each job)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections

from .. import signals
from ..batches import BatchJob
from ..context import CancelSignal
from ..database_context import home_context
from ..exceptions import BatchAnswerInvalid, BatchAnswerMissing, InvalidPayload, JobTimeout
from ..managers import result_json
from ..tasks import Task
from . import middleware
from .classify import Outcome, default_policy, discarded_by, outcome_of, permit_wait
from .runner import SlotRunner, _cancellable

if TYPE_CHECKING:
    from .lanes import Running

logger = logging.getLogger("django_jobq")


def run_batch(runner: SlotRunner, task: Task[Any, Any], members: list[Running]) -> list[Outcome]:
    """Run ``members`` (jobs of ``task``, each claimed by this worker) in one call of the task's
    function; one Outcome per member, in order. Never raises."""
    if runner.own_connections:
        close_old_connections()
    try:
        return _run(runner, task, members)
    finally:
        if runner.own_connections:
            close_old_connections()


def _run(runner: SlotRunner, task: Task[Any, Any], members: list[Running]) -> list[Outcome]:
    policy, discards = task.retry or default_policy(), discarded_by(task)
    outcomes: dict[int, Outcome] = {}
    ready: list[tuple[int, Running]] = []
    for i, entry in enumerate(members):
        fence, attempt = entry.fence, entry.attempt
        if entry.cancel.is_set():  # asked before the call: never part of it
            outcomes[i] = Outcome(
                fence=fence, attempt=attempt, error="cancelled before it started", discard=True
            )
        elif (
            wait := permit_wait(
                task, entry.job.queue, permitted=entry.permitted, task_permitted=entry.task_permitted
            )
        ) is not None:
            outcomes[i] = Outcome(fence=fence, attempt=attempt, snooze=wait)  # no permit: waits for one
        elif not isinstance(entry.job.payload, dict):
            problem = InvalidPayload(f"payload must be a JSON object, not {type(entry.job.payload).__name__}")
            outcomes[i] = outcome_of(problem, entry.job, fence, attempt, policy, discards, False, 0.0)
        else:
            ready.append((i, entry))
    if ready:
        outcomes.update(_call(runner, task, ready, policy, discards))
    return [outcomes[i] for i in range(len(members))]


def _call(
    runner: SlotRunner, task: Task[Any, Any], ready: list[tuple[int, Running]], policy: Any,
    discards: tuple[type[BaseException], ...],
) -> dict[int, Outcome]:  # fmt: skip
    """Call the task with the ``ready`` members; their outcomes by index."""
    jobs = [
        BatchJob(
            id=e.job.id,
            payload=e.job.payload,
            attempt=e.attempt,
            max_attempts=e.job.max_attempts,
            context=runner.context(e.job, e.fence, e.attempt, e.cancel),
        )
        for _, e in ready
    ]
    for _, entry in ready:
        signals.send(signals.job_started, job=entry.job, worker_id=runner.worker_id)
    started = time.monotonic()
    try:
        answer = _invoke(runner, task, jobs, ready[0][1])
    except BaseException as exc:  # the whole call failed: one failed attempt for each of its jobs
        duration = time.monotonic() - started
        return {
            i: outcome_of(exc, e.job, e.fence, e.attempt, policy, discards, e.cancel.is_set(), duration)
            for i, e in ready
        }
    duration = time.monotonic() - started
    if answer is not None and not isinstance(answer, Mapping):
        kind = type(answer).__name__
        bad = BatchAnswerInvalid(f"a batch task returns None or a mapping of job id to outcome, not {kind}")
        return {
            i: outcome_of(bad, e.job, e.fence, e.attempt, policy, discards, False, duration) for i, e in ready
        }
    ids = {e.job.id for _, e in ready}
    if answer and (strangers := [k for k in answer if k not in ids]):
        logger.warning("batch task %s answered for %d job(s) not in its batch (ignored): %.200s",
                       task.name, len(strangers), strangers)  # fmt: skip
    outcomes: dict[int, Outcome] = {}
    for i, entry in ready:
        fence, attempt = entry.fence, entry.attempt
        value = None if answer is None else answer.get(entry.job.id, _MISSING)
        if entry.cancel.is_set():  # asked while the call ran: whatever it answered is discarded
            outcomes[i] = Outcome(
                fence=fence, attempt=attempt, error="cancelled while it ran; its result was discarded",
                discard=True, duration=duration,
            )  # fmt: skip
            continue
        if value is _MISSING:
            value = BatchAnswerMissing(f"the batch task's answer names no outcome for job {entry.job.id}")
        if not isinstance(value, BaseException):
            try:
                outcomes[i] = Outcome(
                    fence=fence, attempt=attempt, result_json=result_json(value), duration=duration
                )
                continue
            except Exception as exc:  # a result that is not JSON, or too large: that job fails
                value = exc
        outcomes[i] = outcome_of(value, entry.job, fence, attempt, policy, discards, False, duration)
    return outcomes


_MISSING = object()


def _invoke(runner: SlotRunner, task: Task[Any, Any], jobs: list[BatchJob], first: Running) -> Any:
    """The task's function called with the batch, inside the middleware (once, as for the batch's first
    job); an ``async def`` one within its timeout (never cancelled by one job's cancel: a signal of
    its own, never set)."""
    chain = middleware.layers()
    context = jobs[0].context
    if not task.is_async:  # the task's own code runs on the home context (conf.home_context)
        return home_context().run(
            lambda: (
                middleware.run_sync(chain, first.job, context, lambda: task.func(jobs))
                if chain
                else task.func(jobs)
            )
        )
    main = (
        middleware.run_async(chain, first.job, context, lambda: task.func(jobs)) if chain else task.func(jobs)
    )
    try:
        return runner.event_loop().run(
            _cancellable(main, first.timeout, CancelSignal()), context=home_context()
        )
    except TimeoutError:
        if first.timeout is None:
            raise
        raise JobTimeout(f"the batch ran longer than its timeout of {first.timeout}s") from None
