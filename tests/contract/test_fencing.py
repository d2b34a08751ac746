"""The fencing token never repeats for a job, across claims, in-slot retries, reaps, releases and
requeues; dead letters requeue cleanly; releases and the error history are bounded."""

import datetime as dt

import pytest
import time_machine

from django_jobq.models import Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.p0, pytest.mark.django_db]

T0 = dt.datetime(2026, 4, 1, 9, 0, tzinfo=dt.UTC)


def test_a_stale_run_cannot_complete_the_job_after_reap_dead_requeue_and_reclaim(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        jid = Job.objects.enqueue("test.echo", max_attempts=1)
        old = Job.objects.claim("w1", lease_seconds=5)  # slot A runs attempt 1 ...
        clock.shift(6)
        assert Job.objects.reap() == [jid]  # ... its lease expires: DEAD (no attempts left)
        assert Job.objects.get(id=jid).status == JobStatus.DEAD
        assert Job.objects.requeue(jid) is True
        new = Job.objects.claim("w1", lease_seconds=60)  # slot B of the same worker: attempt 1 again
        assert (old.attempts, new.attempts) == (1, 1)
        assert new.fence > old.fence  # but never the same token
        assert Job.objects.complete(jid, "w1", "stale result", fence=old.fence) is False
        assert Job.objects.fail(jid, "w1", "stale error", fence=old.fence) is None
        assert Job.objects.renew_lease(jid, "w1", fence=old.fence) is False
        assert Job.objects.retry_in_slot(jid, "w1", old.fence, "stale") is None
        assert Job.objects.complete(jid, "w1", "fresh result", fence=new.fence) is True
    assert Job.objects.get(id=jid).result == "fresh result"


def test_every_path_back_to_running_raises_the_fence(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        jid = Job.objects.enqueue("test.echo", max_attempts=10)
        seen = []

        def claim():
            job = Job.objects.claim("w1", lease_seconds=5)
            seen.append(job.fence)
            return job

        job = claim()
        seen.append(Job.objects.retry_in_slot(jid, "w1", job.fence, "boom")[1])  # in-slot retry
        Job.objects.release("w1")  # shutdown release
        job = claim()
        clock.shift(6)
        Job.objects.reap()  # lease expiry
        job = claim()
        Job.objects.fail(jid, "w1", "x", permanent=True, fence=job.fence)
        Job.objects.requeue(jid)  # dead letter requeued
        claim()
    assert seen == sorted(set(seen)) and len(seen) == 5


def test_bulk_requeue_of_dead_jobs_sharing_a_dedupe_key_requeues_the_newest_and_the_rest():
    def dead(key=None):
        jid = Job.objects.enqueue("test.noop", dedupe_key=key, max_attempts=1, dedupe_dead=0)
        Job.objects.claim("w1")
        Job.objects.fail(jid, "w1", "boom")
        return jid

    older, newer, unrelated, keyless = dead("k"), dead("k"), dead("other"), dead()
    requeued = Job.objects.requeue_many([older, newer, unrelated, keyless])
    assert sorted(requeued) == sorted([newer, unrelated, keyless])
    assert Job.objects.get(id=older).status == JobStatus.DEAD  # the key is taken by the newer one
    assert Job.objects.get(id=newer).status == JobStatus.PENDING


def test_releases_are_free_only_up_to_the_limit_then_use_up_attempts(settings):
    settings.JOBQ = {**settings.JOBQ, "FREE_RELEASES": 2}
    jid = Job.objects.enqueue("test.noop", max_attempts=2)
    states = []
    for _ in range(5):
        Job.objects.claim("w1")
        Job.objects.release("w1")
        job = Job.objects.get(id=jid)
        states.append((job.status, job.attempts, job.releases))
    assert states == [
        (JobStatus.PENDING, 0, 1),  # free
        (JobStatus.PENDING, 0, 2),  # free
        (JobStatus.PENDING, 1, 3),  # counted
        (JobStatus.DEAD, 2, 4),  # counted, and no attempts left: a job that outlives every deploy ends
        (JobStatus.DEAD, 2, 4),  # DEAD jobs are not claimed
    ]
    assert Job.objects.get(id=jid).max_attempts == 2  # the budget itself never grows


def test_the_error_history_keeps_the_last_entries_and_counts_them_all(settings):
    settings.JOBQ = {**settings.JOBQ, "ERROR_HISTORY": 4}
    jid = Job.objects.enqueue("test.noop", max_attempts=50)
    for n in range(11):
        job = Job.objects.claim("w1")
        Job.objects.fail(jid, "w1", f"failure {n}", backoff_seconds=0, fence=job.fence)
    job = Job.objects.get(id=jid)
    assert [e["error"] for e in job.errors] == ["failure 7", "failure 8", "failure 9", "failure 10"]
    assert job.error_count == 11 and job.last_error == "failure 10"


def test_unfenced_writes_act_for_the_owner_only():
    jid = Job.objects.enqueue("test.noop")
    Job.objects.claim("w1")
    assert Job.objects.complete(jid, "w2") is False  # another worker: refused even unfenced
    assert Job.objects.complete(jid, "w1") is True  # the owner, any of its runs (manual use)
