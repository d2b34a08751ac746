"""JOBQ["QUEUES"][q]["MAX_DEPTH"]: past the limit enqueue raises QueueFull and writes nothing; under
concurrent producers the depth exceeds the limit by at most one job per concurrent call."""

import threading

import pytest
from django.db import connection, connections

from django_jobq import QueueFull
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, QueueState
from django_jobq.sql import POSTGRES as postgres
from tests.conftest import plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def limit(settings):
    def set_limit(n: int, queue: str = "small") -> None:
        settings.JOBQ = {**settings.JOBQ, "QUEUES": {queue: {"MAX_DEPTH": n}}}

    return set_limit


def pending(queue: str = "small") -> int:
    return Job.objects.filter(queue=queue, status=JobStatus.PENDING).count()


@pytest.mark.p0
def test_enqueue_past_the_limit_raises_queue_full_and_writes_nothing(limit):
    limit(5)
    ids = [Job.objects.enqueue("test.noop", queue="small") for _ in range(5)]
    assert all(ids)
    with pytest.raises(QueueFull, match="queue 'small' is full: it holds its MAX_DEPTH of 5"):
        Job.objects.enqueue("test.noop", queue="small")
    assert Job.objects.count() == 5
    assert Job.objects.enqueue("test.noop", queue="other")  # other queues are not limited
    job = Job.objects.claim("w1", queues=["small"])
    assert job is not None
    assert Job.objects.enqueue("test.noop", queue="small")  # a claim made room
    assert pending() == 5


def test_a_full_queue_neither_frees_a_key_nor_inserts(limit, python_clock):
    limit(1)
    old = Job.objects.enqueue("test.noop", queue="small", dedupe_key="k", dedupe_done=0)
    job = Job.objects.claim("w1", queues=["small"])
    Job.objects.complete(old, "w1", fence=job.fence)
    Job.objects.enqueue("test.noop", queue="small")  # the queue is full again
    for mode in ("skip", "replace"):
        with pytest.raises(QueueFull):
            Job.objects.enqueue("test.noop", queue="small", dedupe_key="k", on_duplicate=mode)
    with pytest.raises(QueueFull):
        Job.objects.enqueue_or_get("test.noop", queue="small", dedupe_key="k")
    assert not Job.objects.get(id=old).key_released  # nothing was written, not even the release


def test_a_duplicate_in_a_full_queue_is_answered_as_a_duplicate(limit):
    """A call whose key is held adds no job: skipped (None), or its PENDING holder replaced."""
    limit(1)
    holder = Job.objects.enqueue("test.echo", {"v": 1}, queue="small", dedupe_key="k")
    assert Job.objects.enqueue_or_get("test.echo", {"v": 2}, queue="small", dedupe_key="k") == (holder, False)
    assert Job.objects.enqueue("test.echo", {"v": 3}, queue="small", dedupe_key="k") is None
    assert (
        Job.objects.enqueue("test.echo", {"v": 4}, queue="small", dedupe_key="k", on_duplicate="replace")
        == holder
    )
    assert Job.objects.get(id=holder).payload == {"v": 4}
    with pytest.raises(QueueFull):
        Job.objects.enqueue("test.echo", {"v": 5}, queue="small", dedupe_key="other")


def test_enqueue_many_is_all_or_nothing(limit):
    limit(10)
    Job.objects.enqueue_many(NewJob("test.noop", queue="small") for _ in range(8))
    with pytest.raises(QueueFull, match="'small'"):
        Job.objects.enqueue_many(
            [NewJob("test.noop", queue="other"), *[NewJob("test.noop", queue="small")] * 3]
        )
    assert Job.objects.count() == 8
    assert len(Job.objects.enqueue_many([NewJob("test.noop", queue="small")] * 2)) == 2
    assert pending() == 10


def test_the_reapers_baseline_is_a_bound_that_claims_only_loosen(limit):
    limit(5)
    Job.objects.enqueue_many(NewJob("test.noop", queue="small") for _ in range(3))
    Job.objects.refresh_depths()
    state = QueueState.objects.get(name="small")
    assert state.depth_count == 3 and state.depth_seq >= 3
    Job.objects.enqueue("test.noop", queue="small")
    Job.objects.enqueue("test.noop", queue="small")
    with pytest.raises(QueueFull):
        Job.objects.enqueue("test.noop", queue="small")
    Job.objects.refresh_depths()  # baseline 5: full
    for _ in range(3):
        Job.objects.claim("w1", queues=["small"])
    assert [bool(Job.objects.enqueue("test.noop", queue="small")) for _ in range(3)] == [True] * 3
    with pytest.raises(QueueFull):
        Job.objects.enqueue("test.noop", queue="small")


@pytest.mark.p0
def test_eight_concurrent_producers_exceed_the_limit_by_at_most_one_job_each(limit):
    limit(50)
    barrier = threading.Barrier(8)
    accepted, refused = [], []
    lock = threading.Lock()

    def produce():
        try:
            for _ in range(20):
                barrier.wait()
                try:
                    job_id = Job.objects.enqueue("test.noop", queue="small")
                    with lock:
                        accepted.append(job_id)
                except QueueFull:
                    with lock:
                        refused.append(1)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    depth = pending()
    assert depth == len(accepted) and len(accepted) + len(refused) == 160
    assert 50 <= depth <= 50 + 8  # the stated bound: one job over per concurrent producer at most
    assert refused  # the limit did refuse


def _analyze(sql: str, params: dict) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", {"now": None, **params})
        plan = cursor.fetchone()[0]
        cursor.execute("ROLLBACK")
    return plan[0]["Plan"]


def test_with_a_fresh_baseline_enqueue_never_counts_a_deep_queue(limit):
    limit(1_000_000)
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at)
               SELECT 'test.noop', 'small', '{}', 0, 100, now(), 0, 5, '[]', now() FROM generate_series(1, 100000)"""
        )
        cursor.execute("ANALYZE jobq_job")
    Job.objects.refresh_depths()
    params = {
        "task": "test.noop", "queue": "small", "payload": "{}", "priority": 100, "run_at": None, "delay": 0.0,
        "max_attempts": 5, "dedupe_key": None, "dedupe_done": None, "dedupe_dead": None, "notify": False,
        "concurrency_key": None,
        "channel": "jobq", "max_depth": 1_000_000,
    }  # fmt: skip
    nodes = list(plan_nodes(_analyze(postgres.ENQUEUE_GATED, params)))
    counts = [n for n in nodes if n["Node Type"] == "Aggregate"]
    assert counts and all(n.get("Actual Loops", 0) == 0 for n in counts)  # the exact count never ran
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Actual Loops", 0)]
