"""Guarded transitions: fencing of stale owners, reaping, requeue, outbox rollback, pruning."""

import asyncio
import datetime as dt
import time

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connections, transaction

from django_jobq.models import Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.django_db]

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)


@pytest.mark.p0
def test_stale_owner_is_refused_after_reap_and_reclaim(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        jid = Job.objects.enqueue("test.echo")
        first = Job.objects.claim("w1", lease_seconds=5)
        clock.shift(6)
        assert Job.objects.reap() == [jid]
        second = Job.objects.claim("w1", lease_seconds=5)  # same worker name, new attempt
        assert second.attempts == first.attempts + 1 and second.fence == first.fence + 1
        # The first attempt's late writes are refused by the fencing token ...
        assert Job.objects.complete(jid, "w1", "late", fence=first.fence) is False
        assert Job.objects.fail(jid, "w1", "late", fence=first.fence) is None
        assert Job.objects.renew_lease(jid, "w1", fence=first.fence) is False
        assert Job.objects.heartbeat("w1", [(jid, first.fence)]) == {(jid, first.fence)}  # lost
        assert not Job.objects.complete_many("w1", [(jid, first.fence, '"late"')]).ended
        # ... and a different worker's too, while the current attempt's owner still succeeds.
        assert Job.objects.complete(jid, "w0", "late") is False
        assert Job.objects.complete(jid, "w1", "ok", fence=second.fence) is True
    job = Job.objects.get(id=jid)
    assert job.status == JobStatus.DONE and job.result == "ok"


def test_each_statement_records_its_own_time_not_its_transactions_start():
    """A claim or a completion made late in a longer transaction (a capped claim after its lock, an
    atomic task's DONE after its work) writes when it happened: a dependent claimed in a transaction
    begun before its dependency finished never shows a start before that finish."""
    with transaction.atomic():
        first = Job.objects.enqueue("test.echo")
        then = Job.objects.enqueue("test.echo", depends_on=[first])
        run = Job.objects.claim("w1", lease_seconds=30)
        time.sleep(0.002)  # past the coarsest clock's resolution (SQLite's: a millisecond)
        assert Job.objects.complete(first, "w1", "ok", fence=run.fence)
        time.sleep(0.002)
        assert Job.objects.claim("w1", lease_seconds=30).id == then
    a, b = Job.objects.get(id=first), Job.objects.get(id=then)
    assert a.created_at <= a.started_at < a.finished_at < b.started_at


@pytest.mark.p0
def test_reap_returns_the_whole_backlog_and_buries_exhausted_jobs(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        ids = [Job.objects.enqueue("test.noop", max_attempts=1 if i % 5 == 0 else 3) for i in range(150)]
        assert len(Job.objects.claim_batch("crashed", 200, lease_seconds=10)) == 150
        clock.shift(9)
        assert Job.objects.reap() == []
        clock.shift(2)
        reaped = Job.objects.reap()
        assert sorted(reaped) == sorted(ids)  # one call, every expired lease
    counts = Job.objects.counts()
    assert counts == {"PENDING": 120, "RUNNING": 0, "DONE": 0, "DEAD": 30, "CANCELLED": 0, "WAITING": 0}
    dead = Job.objects.filter(status=JobStatus.DEAD).first()
    assert "lease expired" in dead.last_error and dead.worker_id == "crashed"


@pytest.mark.p0
def test_reap_leaves_renewed_leases_alone(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        jid = Job.objects.enqueue("test.noop")
        job = Job.objects.claim("w1", lease_seconds=10)
        clock.shift(8)
        assert Job.objects.heartbeat("w1", [(jid, job.fence)], lease_seconds=10) == set()  # none lost
        clock.shift(8)
        assert Job.objects.reap() == []
        assert Job.objects.renew_lease(jid, "w1", 10, fence=job.fence) is True


@pytest.mark.p0
def test_enqueue_in_rolled_back_transaction_leaves_no_job():
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.enqueue("test.echo", {"n": 1}, dedupe_key="outbox-1")
        raise RuntimeError("the view failed")
    assert not Job.objects.exists()
    # The key is free again: nothing of the rolled-back job remains.
    assert Job.objects.enqueue("test.echo", {"n": 1}, dedupe_key="outbox-1")


def test_delayed_job_is_not_claimed_before_run_at(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        jid = Job.objects.enqueue("test.noop", delay=30)
        assert Job.objects.claim("w1") is None
        clock.shift(31)
        assert Job.objects.claim("w1").id == jid


def test_fail_backoff_defaults_to_jitter_below_the_ceiling(python_clock):
    with time_machine.travel(T0, tick=False):
        delays = []
        for i in range(20):
            # a queue each: a retry whose jitter came out under SQLite's millisecond is due again at T0
            jid = Job.objects.enqueue("test.noop", max_attempts=10, queue=f"q{i}")
            assert Job.objects.claim("w1", queues=[f"q{i}"]).id == jid
            assert Job.objects.fail(jid, "w1", "boom") == JobStatus.PENDING
            delays.append((Job.objects.get(id=jid).run_at - T0).total_seconds())
    assert all(0 <= d <= 5 for d in delays)  # compute_backoff(1) with the default base
    assert len(set(delays)) > 1  # jittered, not one fixed delay


def test_permanent_failure_goes_dead_at_once():
    jid = Job.objects.enqueue("test.noop", max_attempts=5)
    Job.objects.claim("w1")
    assert Job.objects.fail(jid, "w1", "bad input", permanent=True) == JobStatus.DEAD
    assert Job.objects.get(id=jid).attempts == 1


def test_requeue_only_from_dead_and_keeps_history():
    jid = Job.objects.enqueue("test.noop", max_attempts=1)
    assert Job.objects.requeue(jid) is False  # PENDING
    Job.objects.claim("w1")
    assert Job.objects.requeue(jid) is False  # RUNNING: never reset
    Job.objects.fail(jid, "w1", "boom")
    assert Job.objects.requeue(jid) is True
    job = Job.objects.get(id=jid)
    assert (job.status, job.attempts, job.worker_id) == (JobStatus.PENDING, 0, None)
    assert [e["error"] for e in job.errors] == ["boom"] and job.last_error == "boom"


def test_requeue_is_refused_while_the_dedupe_key_is_active_again():
    jid = Job.objects.enqueue("test.noop", dedupe_key="k", max_attempts=1, dedupe_dead=0)
    Job.objects.claim("w1")
    Job.objects.fail(jid, "w1", "boom")
    newer = Job.objects.enqueue("test.noop", dedupe_key="k")  # the key's window of 0 is over
    assert newer
    assert Job.objects.requeue(jid) is False
    assert Job.objects.get(id=jid).status == JobStatus.DEAD


def test_release_returns_jobs_without_using_their_retry_budget():
    jid = Job.objects.enqueue("test.noop", max_attempts=2)
    Job.objects.claim("w1")
    assert Job.objects.release("w1") == [jid]
    released = Job.objects.get(id=jid)
    assert (released.status, released.attempts, released.max_attempts) == (JobStatus.PENDING, 0, 2)
    assert (released.releases, released.fence) == (1, 1)
    assert Job.objects.release("w1") == []  # no longer owned


def test_prune_deletes_only_old_terminal_jobs(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        done = Job.objects.enqueue("test.noop")
        dead = Job.objects.enqueue("test.noop", max_attempts=1)
        Job.objects.claim("w1")
        Job.objects.claim("w1")
        Job.objects.complete(done, "w1")
        Job.objects.fail(dead, "w1", "x")
        pending = Job.objects.enqueue("test.noop")
        running = Job.objects.enqueue("test.noop")
        Job.objects.claim("w2", lease_seconds=10**6)
        clock.shift(3600)
        assert Job.objects.prune(JobStatus.DONE, older_than=7200, batch=10) == 0
        assert Job.objects.prune(JobStatus.DONE, older_than=1800, batch=10) == 1
        assert Job.objects.prune(JobStatus.DEAD, older_than=1800, batch=10) == 1
        with pytest.raises(ValueError):
            Job.objects.prune(JobStatus.PENDING, older_than=0, batch=10)
    assert set(Job.objects.values_list("id", flat=True)) == {pending, running}


def test_counts_are_zero_filled_and_per_queue():
    Job.objects.enqueue("test.noop", queue="a")
    Job.objects.enqueue("test.noop", queue="b")
    Job.objects.claim("w", queues=["b"])
    assert Job.objects.counts() == {
        "PENDING": 1,
        "RUNNING": 1,
        "DONE": 0,
        "DEAD": 0,
        "CANCELLED": 0,
        "WAITING": 0,
    }
    assert Job.objects.counts("b") == {
        "PENDING": 0,
        "RUNNING": 1,
        "DONE": 0,
        "DEAD": 0,
        "CANCELLED": 0,
        "WAITING": 0,
    }


def test_claim_filters_by_queue():
    a = Job.objects.enqueue("test.noop", queue="a")
    b = Job.objects.enqueue("test.noop", queue="b")
    c = Job.objects.enqueue("test.noop", queue="c")
    assert Job.objects.claim("w", queues=["c"]).id == c
    assert {j.id for j in Job.objects.claim_batch("w", 5, queues=["a", "b"])} == {a, b}


def test_set_progress_by_owner_only():
    jid = Job.objects.enqueue("test.noop")
    job = Job.objects.claim("w1")
    assert Job.objects.set_progress(jid, "w1", job.fence, 3, 10) is True
    assert Job.objects.set_progress(jid, "w2", job.fence, 4, 10) is False
    assert Job.objects.get(id=jid).progress == {"done": 3, "total": 10}


@pytest.mark.django_db(transaction=True)
def test_async_twins_share_the_sync_code():
    async def scenario():
        jid = await Job.objects.aenqueue("test.echo", {"a": 1})
        job = await Job.objects.aclaim("aw")
        assert job.id == jid
        assert await Job.objects.acomplete(jid, "aw", {"ok": True}) is True
        counts = await Job.objects.acounts()
        await sync_to_async(connections.close_all)()  # the executor thread's connection
        return jid, counts

    jid, counts = asyncio.run(scenario())
    assert counts["DONE"] == 1 and Job.objects.get(id=jid).result == {"ok": True}
