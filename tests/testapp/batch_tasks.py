"""Batch tasks of the tests (django_jobq.batches): each call records one Execution per job it was given,
its worker_id field as "<worker id>|<call id>" so that a test can tell the calls apart."""

import time
import uuid

from django.utils import timezone

import django_jobq
from django_jobq import Batch, RetryPolicy

from .models import Execution

FAST_RETRY = RetryPolicy(base=0.05, cap=0.1)


def _record(jobs) -> None:
    call, now = uuid.uuid4().hex, timezone.now()
    Execution.objects.bulk_create(
        Execution(job_id=j.id, attempt=j.attempt, fence=j.context.fence, worker_id=f"{j.context.worker_id}|{call}",
                  ran_at=now)
        for j in jobs
    )  # fmt: skip


@django_jobq.task(name="test.batch", queue="batches", batch=Batch(size=100, wait=0.2), retry=FAST_RETRY)
def batch(jobs):
    """Each job's payload: n (its result), fail_attempts (fails its first attempts), bad (answers
    something that is not JSON), explode (the whole call raises)."""
    _record(jobs)
    if any(j.payload.get("explode") for j in jobs):
        raise RuntimeError("the provider is down")
    answer = {}
    for j in jobs:
        if j.payload.get("fail_attempts", 0) >= j.attempt:
            answer[j.id] = ValueError(f"job {j.payload.get('n')} was refused by the provider")
        elif j.payload.get("bad"):
            answer[j.id] = {1, 2}
        else:
            answer[j.id] = {"n": j.payload.get("n")}
    return answer


@django_jobq.task(name="test.batch_keyed", queue="batches", batch=Batch(size=50, wait=0.2, key="provider"))
def batch_keyed(jobs):
    _record(jobs)
    return {j.id: j.payload.get("provider") for j in jobs}


@django_jobq.task(name="test.batch_fill", queue="batches", batch=Batch(size=5, wait=60.0))
def batch_fill(jobs):
    """Waits (up to a minute) for five jobs before it is called."""
    _record(jobs)


@django_jobq.task(name="test.batch_answers", queue="batches", batch=Batch(size=10, wait=0.2), max_attempts=1)
def batch_answers(jobs):
    """Answers as payload["answer"] of its first job says: "none", "empty", "list", "strangers"."""
    _record(jobs)
    how = jobs[0].payload.get("answer")
    if how == "none":
        return None
    if how == "empty":
        return {}
    if how == "list":
        return [j.id for j in jobs]
    return {**{j.id: "ok" for j in jobs}, -1: "someone else's", 10**12: "x"}


@django_jobq.task(name="test.batch_hold", queue="batches", batch=Batch(size=10, wait=0.5))
def batch_hold(jobs):
    """Holds until a cancel was asked of one of its jobs (at most payload["seconds"]), then answers
    "finished" for each; a job whose cancel it saw answers "saw the cancel"."""
    _record(jobs)
    deadline = time.monotonic() + max(j.payload.get("seconds", 30) for j in jobs)
    while time.monotonic() < deadline and not any(j.cancelled for j in jobs):
        time.sleep(0.02)
    return {j.id: "saw the cancel" if j.cancelled else "finished" for j in jobs}


@django_jobq.task(name="test.batch_async", queue="batches", batch=Batch(size=20, wait=0.2))
async def batch_async(jobs):
    from asgiref.sync import sync_to_async

    await sync_to_async(_record)(jobs)
    return {j.id: j.payload.get("n") for j in jobs}


@django_jobq.task(name="test.ledger_batch", batch=Batch(size=100, wait=0.5), max_attempts=100)
def ledger_batch(jobs):
    """test.ledger as a batch: a ledger row per job of the call (job, attempt, fence), then ``ms`` of
    work; a call holding a first run (fence 1) takes ``first_run_seconds`` more."""
    from .models import Ledger

    Ledger.objects.bulk_create(
        Ledger(job_id=j.id, attempt=j.attempt, fence=j.context.fence, worker_id=j.context.worker_id)
        for j in jobs
    )
    first = max((j.payload.get("first_run_seconds", 0.0) for j in jobs if j.context.fence == 1), default=0.0)
    time.sleep(max(j.payload.get("ms", 0) for j in jobs) / 1000 + first)
    return {j.id: {"fence": j.context.fence} for j in jobs}
