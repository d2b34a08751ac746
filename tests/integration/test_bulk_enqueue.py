"""enqueue_many's COPY path (a PostgreSQL batch without dedupe keys, of at least BULK_MIN_ROWS jobs):
the same rows the one-statement path writes, ids in the batch's order, all or nothing."""

import datetime as dt

import pytest
import time_machine
from django.db import connection, transaction

from django_jobq.exceptions import InvalidJob, InvalidPayload, JobqError
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.sql.postgres.bulk import BULK_MIN_ROWS

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# Every column a job is written with, besides the id and the clock.
COLUMNS = (
    "task", "queue", "payload", "status", "priority", "attempts", "max_attempts", "fence", "releases",
    "error_count", "dedupe_key", "dedupe_done", "dedupe_dead", "concurrency_key", "errors", "key_released",
    "awaited", "worker_id", "lease_until", "result", "started_at", "finished_at",
)  # fmt: skip


def batch(n: int, **fields) -> list[NewJob]:
    return [
        NewJob("test.echo", {"n": i, "text": "tab\there, \\ back\nslash, ünï"}, **fields) for i in range(n)
    ]


def rows(ids: list[int]) -> list[tuple]:
    return list(Job.objects.filter(id__in=ids).order_by("id").values_list(*COLUMNS))


def test_a_large_batch_writes_what_a_small_one_writes_in_its_order():
    small = Job.objects.enqueue_many(batch(3, queue="mail", priority=7, max_attempts=2, concurrency_key="k"))
    large = Job.objects.enqueue_many(
        batch(BULK_MIN_ROWS + 5, queue="mail", priority=7, max_attempts=2, concurrency_key="k")
    )
    assert len(large) == BULK_MIN_ROWS + 5 and large == sorted(large) and min(large) > max(small)
    assert rows(large)[:3] == rows(small)
    payloads = [p for (p,) in Job.objects.filter(id__in=large).order_by("id").values_list("payload")]
    assert [p["n"] for p in payloads] == list(range(BULK_MIN_ROWS + 5))  # each id is its job's
    job = Job.objects.get(id=large[0])
    assert job.status == JobStatus.PENDING and job.run_at == job.created_at


def test_run_at_and_the_python_clock_are_kept(settings):
    settings.JOBQ = {**settings.JOBQ, "CLOCK": "python"}
    later = dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=dt.UTC)
    with time_machine.travel(dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC), tick=False):
        ids = Job.objects.enqueue_many([*batch(BULK_MIN_ROWS), NewJob("test.echo", {"n": 1}, run_at=later)])
    first, last = Job.objects.get(id=ids[0]), Job.objects.get(id=ids[-1])
    assert first.created_at == first.run_at == dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert last.run_at == later


def test_a_bad_job_anywhere_writes_nothing():
    jobs = batch(BULK_MIN_ROWS * 2)
    jobs[-1] = NewJob("test.echo", {"n": "\x00"})
    with pytest.raises(InvalidPayload, match=rf"job {BULK_MIN_ROWS * 2 - 1}: .*NUL"):
        Job.objects.enqueue_many(jobs)
    assert not Job.objects.exists()


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "payload, error",
    [
        ({"text": "lone \ud800 surrogate"}, "surrogate"),
        (_nested(200), "nested"),
        ({"big": "x" * 2_000_000}, "limit"),
    ],
    ids=["surrogate", "deep", "huge"],
)
def test_a_hostile_payload_anywhere_writes_nothing(payload, error):
    jobs = batch(BULK_MIN_ROWS)
    jobs[BULK_MIN_ROWS // 2] = NewJob("test.echo", payload)
    with pytest.raises(JobqError, match=error):
        Job.objects.enqueue_many(jobs)
    assert not Job.objects.exists()


def test_a_job_that_is_no_new_job_writes_nothing():
    jobs: list = batch(BULK_MIN_ROWS)
    jobs.insert(BULK_MIN_ROWS // 2, {"task": "test.echo"})
    with pytest.raises(InvalidJob, match=rf"job {BULK_MIN_ROWS // 2}: expected a NewJob, not dict"):
        Job.objects.enqueue_many(iter(jobs))
    assert not Job.objects.exists()


def test_a_generator_of_jobs_is_taken_whole():
    ids = Job.objects.enqueue_many(NewJob("test.echo", {"n": i}) for i in range(BULK_MIN_ROWS))
    assert [Job.objects.get(id=i).payload["n"] for i in ids[:3]] == [0, 1, 2] and len(ids) == BULK_MIN_ROWS


def test_it_joins_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.enqueue_many(batch(BULK_MIN_ROWS))
        assert Job.objects.count() == BULK_MIN_ROWS  # visible inside
        raise RuntimeError("rollback")
    assert not Job.objects.exists()
    with transaction.atomic():
        kept = Job.objects.enqueue_many(batch(BULK_MIN_ROWS))
    assert Job.objects.filter(id__in=kept).count() == BULK_MIN_ROWS


def test_a_refused_copy_leaves_the_callers_transaction_usable(monkeypatch):
    """A COPY the database refuses rolls back its own savepoint only."""
    from django_jobq.sql.postgres import bulk as postgres_bulk
    from django_jobq.sql.postgres import engine as postgres_engine

    monkeypatch.setattr(
        postgres_engine, "BULK_COPY", postgres_bulk.BULK_COPY.replace("jobq_job", "jobq_nope")
    )
    with transaction.atomic():
        before = Job.objects.enqueue("test.echo", {"n": 0})
        with pytest.raises(Exception, match="jobq_nope"):
            Job.objects.enqueue_many(batch(BULK_MIN_ROWS))
        after = Job.objects.enqueue("test.echo", {"n": 1})
    assert list(Job.objects.order_by("id").values_list("id", flat=True)) == [before, after]
    assert not connection.needs_rollback
