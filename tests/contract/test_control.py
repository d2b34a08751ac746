"""Job control on every engine: cancel and cancel_many, and how a cancel asked of a RUNNING job ends
whatever its run writes next (done, failed, released, reaped) as CANCELLED, exactly once."""

import asyncio
import datetime as dt

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connections

from django_jobq import CancelOutcome
from django_jobq.exceptions import InvalidJob
from django_jobq.models import Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.django_db]

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)


def row(job_id: int) -> Job:
    return Job.objects.get(id=job_id)


@pytest.mark.p0
def test_a_pending_job_is_cancelled_at_once_never_claimed_and_gives_its_dedupe_key_up():
    job_id = Job.objects.enqueue("test.noop", dedupe_key="report:7")
    assert Job.objects.cancel(job_id, by="ops") is CancelOutcome.CANCELLED
    job = row(job_id)
    assert (job.status, job.cancelled_by, job.last_error) == (JobStatus.CANCELLED, "ops", "cancelled by ops")
    assert job.finished_at is not None and job.cancel_requested_at is not None
    assert Job.objects.claim("w1") is None  # never claimed
    again = Job.objects.enqueue("test.noop", dedupe_key="report:7")  # the key is free at once
    assert again and again != job_id


@pytest.mark.p0
def test_finished_and_unknown_jobs_are_left_as_they_are():
    done, dead = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop", max_attempts=1)
    Job.objects.claim_batch("w1", 2)
    Job.objects.complete(done, "w1", "kept")
    Job.objects.fail(dead, "w1", "boom")
    assert Job.objects.cancel(done) is CancelOutcome.ALREADY_FINISHED
    assert Job.objects.cancel(dead) is CancelOutcome.ALREADY_FINISHED
    assert (row(done).status, row(done).result, row(done).cancelled_by) == (JobStatus.DONE, "kept", None)
    assert row(dead).status == JobStatus.DEAD and row(dead).cancel_requested_at is None
    assert Job.objects.cancel(10**12) is CancelOutcome.NOT_FOUND
    cancelled = Job.objects.enqueue("test.noop")
    Job.objects.cancel(cancelled)
    assert Job.objects.cancel(cancelled) is CancelOutcome.ALREADY_FINISHED


@pytest.mark.p0
def test_a_running_job_is_asked_and_its_result_is_discarded():
    job_id = Job.objects.enqueue("test.noop", dedupe_key="k")
    claimed = Job.objects.claim("w1")
    assert Job.objects.cancel(job_id, by="first") is CancelOutcome.CANCEL_REQUESTED
    assert Job.objects.cancel(job_id, by="second") is CancelOutcome.CANCEL_REQUESTED  # still asked
    job = row(job_id)
    assert (job.status, job.cancelled_by) == (JobStatus.RUNNING, "first") and job.cancel_requested_at
    assert Job.objects.complete(job_id, "w1", {"sent": True}, fence=claimed.fence) is True
    job = row(job_id)
    assert (job.status, job.result) == (JobStatus.CANCELLED, None)
    assert Job.objects.enqueue("test.noop", dedupe_key="k")  # its key is given up


@pytest.mark.p0
def test_a_batch_of_outcomes_ends_only_the_asked_job_cancelled():
    asked, other = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop")
    runs = {job.id: job.fence for job in Job.objects.claim_batch("w1", 2)}
    Job.objects.cancel(asked)
    done = Job.objects.complete_many("w1", [(asked, runs[asked], '"a"'), (other, runs[other], '"b"')])
    assert (done.done, done.cancelled, done.busy) == ({other}, {asked}, set())  # each as it ended
    assert (row(asked).status, row(asked).result) == (JobStatus.CANCELLED, None)
    assert (row(other).status, row(other).result) == (JobStatus.DONE, "b")


@pytest.mark.p0
@pytest.mark.parametrize("permanent", [False, True])
def test_a_failing_run_that_was_asked_ends_cancelled_never_retried(permanent):
    job_id = Job.objects.enqueue("test.noop", max_attempts=5)
    claimed = Job.objects.claim("w1")
    Job.objects.cancel(job_id)
    assert Job.objects.fail(job_id, "w1", "stopped", fence=claimed.fence, permanent=permanent) is (
        JobStatus.CANCELLED
    )
    job = row(job_id)
    assert (job.status, job.last_error, job.attempts) == (JobStatus.CANCELLED, "stopped", 1)
    assert Job.objects.claim("w1") is None


@pytest.mark.p0
def test_a_discarded_run_ends_cancelled_with_its_reason():
    job_id = Job.objects.enqueue("test.noop", max_attempts=5, dedupe_key="d")
    claimed = Job.objects.claim("w1")
    status = Job.objects.fail(job_id, "w1", "Discard: gone", fence=claimed.fence, discard=True)
    assert status is JobStatus.CANCELLED
    job = row(job_id)
    assert (job.status, job.last_error, job.cancelled_by) == (JobStatus.CANCELLED, "Discard: gone", None)
    assert Job.objects.enqueue("test.noop", dedupe_key="d")


@pytest.mark.p0
def test_an_asked_job_whose_worker_vanished_is_reaped_to_cancelled(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        job_id = Job.objects.enqueue("test.noop", max_attempts=5)
        Job.objects.claim("gone", lease_seconds=5)
        Job.objects.cancel(job_id)
        clock.shift(6)
        assert Job.objects.reap() == [job_id]
    job = row(job_id)
    assert job.status == JobStatus.CANCELLED and "lease expired" in job.last_error
    assert Job.objects.claim("w1") is None


@pytest.mark.p0
def test_an_asked_job_given_back_by_a_stopping_worker_ends_cancelled():
    job_id = Job.objects.enqueue("test.noop")
    Job.objects.claim("w1")
    Job.objects.cancel(job_id, by="ops")
    assert Job.objects.release("w1") == [job_id]
    job = row(job_id)
    assert (job.status, job.last_error) == (JobStatus.CANCELLED, "cancelled by ops")


@pytest.mark.p0
def test_an_asked_job_given_back_unstarted_or_as_an_orphan_ends_cancelled_never_claimed_again():
    ahead, orphan = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop")
    runs = {job.id: job.fence for job in Job.objects.claim_batch("w1", 2)}
    Job.objects.cancel(ahead, by="ops")
    Job.objects.cancel(orphan, by="ops")
    assert Job.objects.release_unstarted("w1", [(ahead, runs[ahead])]) == [ahead]
    assert Job.objects.release_orphans("w1", "default", known=[]) == [orphan]
    for job_id in (ahead, orphan):
        job = row(job_id)
        assert (job.status, job.last_error, job.attempts) == (JobStatus.CANCELLED, "cancelled by ops", 0)
    assert Job.objects.claim("w2") is None


@pytest.mark.p0
def test_an_outcome_written_before_the_cancel_stands():
    job_id = Job.objects.enqueue("test.noop")
    claimed = Job.objects.claim("w1")
    Job.objects.complete(job_id, "w1", 1, fence=claimed.fence)
    assert Job.objects.cancel(job_id) is CancelOutcome.ALREADY_FINISHED
    assert row(job_id).status == JobStatus.DONE


def test_a_cancelled_job_can_be_requeued_and_then_runs_normally():
    job_id = Job.objects.enqueue("test.noop", dedupe_key="again")
    Job.objects.claim("w1")
    Job.objects.cancel(job_id)
    Job.objects.release("w1")
    assert Job.objects.requeue(job_id) is True
    job = row(job_id)
    assert (job.status, job.cancel_requested_at, job.cancelled_by) == (JobStatus.PENDING, None, None)
    claimed = Job.objects.claim("w1")
    Job.objects.complete(job_id, "w1", "ok", fence=claimed.fence)
    assert row(job_id).status == JobStatus.DONE


def test_cancelled_jobs_are_counted_and_pruned_after_their_retention(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        old = Job.objects.enqueue("test.noop", queue="a")
        Job.objects.cancel(old)
        clock.shift(3600)
        young = Job.objects.enqueue("test.noop", queue="b")
        Job.objects.cancel(young)
        assert Job.objects.counts()["CANCELLED"] == 2 and Job.objects.counts("a")["CANCELLED"] == 1
        assert Job.objects.prune(JobStatus.CANCELLED, older_than=1800, batch=10) == 1
    assert list(Job.objects.values_list("id", flat=True)) == [young]


@pytest.mark.p0
def test_cancel_many_by_queue_task_and_ids():
    mail = [Job.objects.enqueue("test.noop", queue="mail") for _ in range(3)]
    echo = Job.objects.enqueue("test.echo", queue="mail")
    other = Job.objects.enqueue("test.noop", queue="other")
    running = Job.objects.claim("w1", queues=["mail"])  # the oldest mail job
    counts = Job.objects.cancel_many(queue="mail", task="test.noop", by="cleanup")
    assert (counts.cancelled, counts.requested) == (2, 1)
    assert running.id == mail[0] and row(mail[0]).status == JobStatus.RUNNING
    assert [row(i).status for i in mail[1:]] == [JobStatus.CANCELLED] * 2
    assert row(echo).status == row(other).status == JobStatus.PENDING
    by_ids = Job.objects.cancel_many(ids=[echo, other, 10**12])
    assert (by_ids.cancelled, by_ids.requested) == (2, 0)
    assert Job.objects.cancel_many(ids=[echo]).cancelled == 0  # already cancelled


def test_cancel_many_walks_past_one_batch(monkeypatch):
    from django_jobq.managers import control

    monkeypatch.setattr(control, "CANCEL_BATCH", 3)
    ids = [Job.objects.enqueue("test.noop", queue="bulk") for _ in range(8)]
    assert Job.objects.cancel_many(queue="bulk").cancelled == 8
    assert Job.objects.cancel_many(ids=ids).cancelled == 0
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.CANCELLED}


@pytest.mark.parametrize(
    "call",
    [
        lambda: Job.objects.cancel_many(),  # no filter: never "cancel everything"
        lambda: Job.objects.cancel_many(ids="12"),
        lambda: Job.objects.cancel_many(ids=[1, "2"]),
        lambda: Job.objects.cancel_many(ids=[True]),
        lambda: Job.objects.cancel_many(ids=list(range(1, 100_002))),
        lambda: Job.objects.cancel_many(queue="*"),
        lambda: Job.objects.cancel_many(queue="a\x00b"),
        lambda: Job.objects.cancel_many(task="x" * 10_000),
        lambda: Job.objects.cancel(0),
        lambda: Job.objects.cancel(-1),
        lambda: Job.objects.cancel(1 << 63),
        lambda: Job.objects.cancel("1"),
        lambda: Job.objects.cancel(1, by="ops\x00"),
        lambda: Job.objects.cancel(1, by="\ud800"),
        lambda: Job.objects.cancel(1, by="x" * 1_000_000),
        lambda: Job.objects.cancel(1, by=None),
    ],
)
def test_bad_cancel_arguments_are_refused_before_anything_is_written(call):
    job_id = Job.objects.enqueue("test.noop", queue="a")
    with pytest.raises(InvalidJob):
        call()
    assert row(job_id).status == JobStatus.PENDING and row(job_id).cancel_requested_at is None


@pytest.mark.django_db(transaction=True)
def test_async_twins():
    job_id = Job.objects.enqueue("test.noop", queue="async")

    async def main():
        return await Job.objects.acancel(job_id), await Job.objects.acancel_many(queue="async")

    async def scenario():
        try:
            return await main()
        finally:
            await sync_to_async(connections.close_all)()  # the executor thread's connection

    outcome, counts = asyncio.run(scenario())
    assert outcome is CancelOutcome.CANCELLED and (counts.cancelled, counts.requested) == (0, 0)


@pytest.mark.p0
def test_reschedule_moves_a_pending_job_only():
    job_id = Job.objects.enqueue("test.noop", priority=50)
    later = dt.datetime(2030, 1, 2, 3, 4, tzinfo=dt.UTC)
    assert Job.objects.reschedule(job_id, run_at=later) is True
    assert (row(job_id).run_at, row(job_id).priority) == (later, 50)
    assert Job.objects.reschedule(job_id, priority=-5) is True
    assert (row(job_id).run_at, row(job_id).priority) == (later, -5)
    assert Job.objects.claim("w1") is None  # not due before 2030
    now = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
    assert Job.objects.reschedule(job_id, run_at=now) is True
    claimed = Job.objects.claim("w1")
    assert claimed.id == job_id
    assert Job.objects.reschedule(job_id, priority=1) is False  # RUNNING: left alone
    assert row(job_id).priority == -5
    assert Job.objects.reschedule(10**12, priority=1) is False


@pytest.mark.parametrize(
    "call",
    [
        lambda job_id: Job.objects.reschedule(job_id),  # neither run_at nor priority
        lambda job_id: Job.objects.reschedule(job_id, run_at=dt.datetime(2030, 1, 1)),  # naive
        lambda job_id: Job.objects.reschedule(job_id, run_at="2030-01-01T00:00:00Z"),
        lambda job_id: Job.objects.reschedule(job_id, priority=40_000),
        lambda job_id: Job.objects.reschedule(job_id, priority=True),
        lambda job_id: Job.objects.reschedule(0, priority=1),
    ],
)
def test_bad_reschedule_arguments_are_refused_before_anything_is_written(call):
    job_id = Job.objects.enqueue("test.noop", priority=50)
    before = row(job_id).run_at
    with pytest.raises(InvalidJob):
        call(job_id)
    assert (row(job_id).run_at, row(job_id).priority) == (before, 50)
