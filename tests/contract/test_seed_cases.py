"""The eight cases of the queue engine's original test file, on this API and a real PostgreSQL."""

import datetime as dt
import threading

import pytest
import time_machine
from django.db import close_old_connections

from django_jobq import compute_backoff
from django_jobq.models import Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.p0]


@pytest.mark.django_db
def test_enqueue_claim_complete():
    jid = Job.objects.enqueue("test.echo", {"query": "커피"}, dedupe_key="search-커피")
    assert jid
    job = Job.objects.claim("w1")
    assert job is not None and job.id == jid
    assert job.payload["query"] == "커피" and job.attempts == 1
    assert job.status == JobStatus.RUNNING and job.worker_id == "w1" and job.lease_until is not None
    assert Job.objects.complete(jid, "w1", {"count": 3}) is True
    counts = Job.objects.counts()
    assert counts["DONE"] == 1 and counts["PENDING"] == 0
    assert Job.objects.get(id=jid).result == {"count": 3}


@pytest.mark.django_db
def test_dedupe_blocks_active_duplicate():
    a = Job.objects.enqueue("test.echo", {"q": 1}, dedupe_key="k")
    b = Job.objects.enqueue("test.echo", {"q": 1}, dedupe_key="k")
    assert a and b is None
    job = Job.objects.claim("w1")
    assert Job.objects.enqueue("test.echo", {"q": 1}, dedupe_key="k") is None  # RUNNING still blocks
    Job.objects.complete(job.id, "w1")
    assert Job.objects.enqueue("test.echo", {"q": 1}, dedupe_key="k") is None  # DONE: inside its window
    a = Job.objects.enqueue("test.echo", {"q": 1}, dedupe_key="k0", dedupe_done=0)
    Job.objects.complete(Job.objects.claim("w1").id, "w1")
    assert Job.objects.enqueue("test.echo", {"q": 1}, dedupe_key="k0") not in (None, a)  # a window of 0


@pytest.mark.django_db(transaction=True)
def test_atomic_claim_no_double_assignment():
    for i in range(12):
        Job.objects.enqueue("test.echo", {"i": i})
    barrier = threading.Barrier(8)
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        try:
            barrier.wait()
            job = Job.objects.claim(f"w{n}")
            if job:
                with lock:
                    claimed.append(job.id)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == 8 and len(set(claimed)) == 8


@pytest.mark.django_db
def test_priority_and_order():
    Job.objects.enqueue("test.echo", {"n": "low"}, priority=100)
    Job.objects.enqueue("test.echo", {"n": "high"}, priority=1)
    Job.objects.enqueue("test.echo", {"n": "low-2"}, priority=100)
    assert [Job.objects.claim("w1").payload["n"] for _ in range(3)] == ["high", "low", "low-2"]


@pytest.mark.django_db
def test_lease_reclaim_by_reaper(python_clock):
    with time_machine.travel(dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC), tick=False) as clock:
        jid = Job.objects.enqueue("test.echo", {"q": "x"})
        job = Job.objects.claim("w1", lease_seconds=1)
        assert job.id == jid and job.attempts == 1
        assert Job.objects.reap() == []  # lease still valid
        clock.shift(1.3)
        assert Job.objects.reap() == [jid]  # the worker died: its lease expired
        job2 = Job.objects.claim("w2")
        assert job2.id == jid and job2.attempts == 2


@pytest.mark.django_db
def test_retry_then_dead_letter():
    jid = Job.objects.enqueue("test.echo", {"q": "x"}, max_attempts=2)
    Job.objects.claim("w1")
    assert Job.objects.fail(jid, "w1", "boom", backoff_seconds=0) == JobStatus.PENDING
    job2 = Job.objects.claim("w1")
    assert job2.attempts == 2
    assert Job.objects.fail(jid, "w1", "boom2", backoff_seconds=0) == JobStatus.DEAD
    assert Job.objects.counts()["DEAD"] == 1
    dead = Job.objects.get(id=jid)
    assert dead.last_error == "boom2" and [e["error"] for e in dead.errors] == ["boom", "boom2"]


@pytest.mark.django_db
def test_transitions_require_ownership():
    jid = Job.objects.enqueue("test.echo", {"q": "x"})
    Job.objects.claim("w1")
    assert Job.objects.complete(jid, "intruder") is False
    assert Job.objects.fail(jid, "intruder", "no") is None
    assert Job.objects.renew_lease(jid, "intruder") is False
    assert Job.objects.complete(jid, "w1") is True


@pytest.mark.unit
def test_backoff_is_exponential_capped():
    assert compute_backoff(1, base=5) == 5
    assert compute_backoff(2, base=5) == 10
    assert compute_backoff(3, base=5) == 20
    assert compute_backoff(100, base=5, cap=600) == 600
