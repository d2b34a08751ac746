"""Tasks of the job-control tests that see a cancel in the database before their worker does (its
heartbeat, which brings the cancel to the run, comes later): each polls its own row."""

import time

import django_jobq
from django_jobq import RetryPolicy
from django_jobq.models import Job

from .models import Execution


class QuickRetry(RetryPolicy):
    """Retry after 0.05 s: an in-slot retry (under JOBQ["SHORT_RETRY_SECONDS"])."""

    def delay(self, attempt, rng=None):
        return 0.05


def _record_then_wait_for_the_cancel(context) -> None:
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
    )
    deadline = time.monotonic() + 60
    while not Job.objects.filter(id=context.job_id, cancel_requested_at__isnull=False).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no cancel was asked")
        time.sleep(0.02)


@django_jobq.task(name="test.fails_once_cancel_asked", takes_context=True, max_attempts=5, retry=QuickRetry())
def fails_once_cancel_asked(context):
    """Fail as soon as a cancel is asked of the job (a retry due in 0.05 s: in the slot)."""
    _record_then_wait_for_the_cancel(context)
    raise ConnectionError("failed after the cancel was asked")


@django_jobq.task(name="test.returns_once_cancel_asked", takes_context=True)
def returns_once_cancel_asked(context):
    """Return a value as soon as a cancel is asked of the job."""
    _record_then_wait_for_the_cancel(context)
    return "finished after the cancel was asked"


@django_jobq.task(
    name="test.atomic_returns_once_cancel_asked", takes_context=True, atomic=True, max_attempts=1
)
def atomic_returns_once_cancel_asked(context):
    """As returns_once_cancel_asked, in the task's transaction (its Execution row rolls back with it)."""
    _record_then_wait_for_the_cancel(context)
    return "finished after the cancel was asked"
