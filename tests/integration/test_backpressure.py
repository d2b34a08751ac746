"""JOBQ["QUEUES"][q]["MAX_DEPTH"]: past the limit (PENDING and RUNNING jobs) enqueue raises QueueFull
and writes nothing, whatever brought the jobs back to PENDING; under concurrent producers the depth
exceeds the limit by at most one job per concurrent call; an enqueue that adds nothing to claim sends no NOTIFY."""

import datetime as dt
import threading

import psycopg
import pytest
import time_machine
from django.db import connection, connections

from django_jobq import QueueFull
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, QueueState
from django_jobq.notify.listener import connection_params
from django_jobq.sql import POSTGRES as postgres
from django_jobq.tasks import task
from tests.conftest import open_enqueue, plan_nodes, wait_until

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
    with pytest.raises(QueueFull):  # a RUNNING job is in the depth: a claim makes no room
        Job.objects.enqueue("test.noop", queue="small")
    assert Job.objects.complete(job.id, "w1", fence=job.fence)
    assert Job.objects.enqueue("test.noop", queue="small")  # its end did
    assert pending() == 5


HOLD = threading.Event()


@task(name="test.held_for_backpressure")
def held_for_backpressure() -> None:
    HOLD.wait(30)


@pytest.mark.p0
def test_jobs_a_worker_holds_running_count_towards_the_depth(limit, worker_thread):
    """Sequential enqueues while a worker holds jobs RUNNING never take the queue past MAX_DEPTH."""
    limit(10)
    HOLD.clear()
    held = [Job.objects.enqueue("test.held_for_backpressure", queue="small") for _ in range(2)]
    try:
        worker_thread({"small": 2})
        wait_until(
            lambda: Job.objects.filter(id__in=held, status=JobStatus.RUNNING).count() == 2,
            message="the worker holds two jobs",
        )
        assert all(Job.objects.enqueue("test.noop", queue="small") for _ in range(8))
        with pytest.raises(QueueFull, match="MAX_DEPTH of 10 PENDING or RUNNING jobs"):
            Job.objects.enqueue("test.noop", queue="small")
        assert (pending(), Job.objects.filter(queue="small", status=JobStatus.RUNNING).count()) == (8, 2)
    finally:
        HOLD.set()


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


def test_a_debounce_successor_needs_room_and_its_replacement_none(limit):
    """A debounce while its holder runs adds a job (the successor): it needs room; a later call of the
    burst only replaces the successor's payload, so it is accepted even in a full queue."""
    limit(2)  # the holder, RUNNING, takes one place
    holder = Job.objects.enqueue("test.echo", {"v": 1}, queue="small", dedupe_key="k")
    assert Job.objects.claim("w1", queues=["small"]).id == holder
    filler = Job.objects.enqueue("test.noop", queue="small")
    with pytest.raises(QueueFull):
        Job.objects.enqueue(
            "test.echo", {"v": 2}, queue="small", dedupe_key="k", delay=5, on_duplicate="debounce"
        )
    assert Job.objects.filter(dedupe_key="k").count() == 1
    assert not Job.objects.get(id=holder).key_released  # nothing written, not even the key's passing
    claimed = Job.objects.claim("w2", queues=["small"])
    assert claimed.id == filler and Job.objects.complete(filler, "w2", fence=claimed.fence)
    successor = Job.objects.enqueue(
        "test.echo", {"v": 3}, queue="small", dedupe_key="k", delay=5, on_duplicate="debounce"
    )
    assert successor not in (None, holder)
    assert (
        Job.objects.enqueue(
            "test.echo", {"v": 4}, queue="small", dedupe_key="k", delay=5, on_duplicate="debounce"
        )
        == successor
    )
    assert Job.objects.get(id=successor).payload == {"v": 4} and pending() == 1


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


def test_the_reapers_baseline_is_a_bound_that_finished_jobs_only_loosen(limit):
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
    jobs = [Job.objects.claim("w1", queues=["small"]) for _ in range(3)]
    with pytest.raises(QueueFull):  # RUNNING, still in the depth
        Job.objects.enqueue("test.noop", queue="small")
    for job in jobs:
        Job.objects.complete(job.id, "w1", fence=job.fence)
    assert [bool(Job.objects.enqueue("test.noop", queue="small")) for _ in range(3)] == [True] * 3
    with pytest.raises(QueueFull):
        Job.objects.enqueue("test.noop", queue="small")


def enqueues(n: int, queue: str = "small") -> int:
    """``n`` sequential enqueues into ``queue``; how many were accepted (the others raised QueueFull)."""
    accepted = 0
    for _ in range(n):
        try:
            Job.objects.enqueue("test.noop", queue=queue)
            accepted += 1
        except QueueFull:
            pass
    return accepted


@pytest.mark.p0
@pytest.mark.parametrize("back", ["release", "retry", "reap", "requeue"])
def test_jobs_back_in_pending_after_the_baseline_count_against_the_limit(limit, python_clock, back):
    """Claimed (or DEAD) when the reaper records its baseline, then PENDING again: sequential enqueues
    still stop at MAX_DEPTH."""
    limit(10)
    with time_machine.travel(dt.datetime(2026, 6, 1, tzinfo=dt.UTC), tick=False) as clock:
        Job.objects.enqueue_many(NewJob("test.noop", queue="small", max_attempts=3) for _ in range(10))
        jobs = Job.objects.claim_batch("w1", 10, queues=["small"], lease_seconds=30)
        assert len(jobs) == 10
        if back == "requeue":
            for job in jobs:
                Job.objects.fail(job.id, "w1", "boom", permanent=True, fence=job.fence)
        Job.objects.refresh_depths()
        if back == "release":
            assert len(Job.objects.release("w1")) == 10
        elif back == "retry":
            for job in jobs:
                Job.objects.fail(job.id, "w1", "boom", backoff_seconds=0, fence=job.fence)
        elif back == "reap":
            clock.shift(31)
            assert len(Job.objects.reap()) == 10
        else:
            assert all(Job.objects.requeue(job.id) for job in jobs)
        assert pending() == 10
        assert enqueues(10) == 0
        assert pending() == 10


@pytest.mark.p0
@pytest.mark.parametrize("earlier_baseline", [False, True])
def test_jobs_of_a_transaction_open_across_the_reapers_pass_count_once_it_commits(limit, earlier_baseline):
    limit(10)
    if earlier_baseline:
        Job.objects.refresh_depths()
    thread, commit, _ = open_enqueue(9, queue="small")
    try:
        Job.objects.refresh_depths()  # the pass cannot see the 9 jobs, nor count them
    finally:
        commit.set()
        thread.join()
    assert pending() == 9
    assert enqueues(10) == 1
    assert pending() == 10


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


def notifications(listen: psycopg.Connection, timeout: float = 0.5) -> list[str]:
    return [n.payload for n in listen.notifies(timeout=timeout)]


@pytest.mark.p0
@pytest.mark.parametrize("gated", [True, False])
def test_an_enqueue_that_adds_nothing_to_claim_sends_no_notification(limit, a_worker_waits, gated):
    """No job written (a skipped duplicate, QueueFull) or nothing new due (a debounce that pushed its
    holder back): no NOTIFY, which every worker would read as "claim again". A real insert notifies."""
    if gated:
        limit(2)
    with psycopg.connect(**connection_params("default"), autocommit=True) as listen:
        listen.execute("LISTEN jobq")
        notifications(listen, 0.2)  # whatever the idle lock's taking sent
        holder = Job.objects.enqueue("test.echo", {"v": 1}, queue="small", dedupe_key="k")
        assert notifications(listen) == ["small"]
        assert Job.objects.enqueue("test.echo", {"v": 2}, queue="small", dedupe_key="k") is None
        debounced = Job.objects.enqueue(
            "test.echo", {"v": 3}, queue="small", dedupe_key="k", delay=30, on_duplicate="debounce"
        )
        assert debounced == holder
        assert notifications(listen) == []
        replaced = Job.objects.enqueue(
            "test.echo", {"v": 4}, queue="small", dedupe_key="k", on_duplicate="replace"
        )
        assert replaced == holder  # due now again: worth a claim
        assert notifications(listen) == ["small"]
        if gated:
            Job.objects.enqueue("test.noop", queue="small")  # the queue is full now
            assert notifications(listen) == ["small"]
            for key in (None, "other"):
                with pytest.raises(QueueFull):
                    Job.objects.enqueue("test.noop", queue="small", dedupe_key=key)
            with pytest.raises(QueueFull):
                Job.objects.enqueue_or_get("test.noop", queue="small", dedupe_key="other")
            assert notifications(listen) == []


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
        "concurrency_key": None, "tags": None, "trace_context": None, "fairness_key": None,
        "channel": "jobq", "max_depth": 1_000_000,
    }  # fmt: skip
    nodes = list(plan_nodes(_analyze(postgres.ENQUEUE_GATED, params)))
    counts = [n for n in nodes if n["Node Type"] == "Aggregate"]
    assert counts and all(n.get("Actual Loops", 0) == 0 for n in counts)  # the exact count never ran
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Actual Loops", 0)]
