"""Claim-ahead: while a lane's runs are short it holds up to slots * (1 + CLAIM_AHEAD) jobs, never
more; a stopping worker gives the ones it never started back at once, without using an attempt; a
killed one's claimed-ahead jobs come back by lease expiry and run once."""

import signal
import threading

import pytest
from django.db import connection

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import start_worker, wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FAST_LEASE = {"JOBQ_LEASE_SECONDS": "2", "JOBQ_HEARTBEAT_SECONDS": "0.5", "JOBQ_POLL_INTERVAL": "0.2"}


def _held_by_workers() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobq_job WHERE status = %s", [int(JobStatus.RUNNING)])
        return cursor.fetchone()[0]


def _most_held_while(worker) -> int:
    """Sample how many jobs are RUNNING (claimed, started or not) until the worker has stopped."""
    from django.db import connections

    most, stop = 0, threading.Event()

    def sample() -> None:
        nonlocal most
        try:
            while not stop.is_set():
                most = max(most, _held_by_workers())
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    wait_until(worker.finished.is_set, timeout=60, interval=0.01, message="worker drained")
    stop.set()
    sampler.join(10)
    return most


@pytest.mark.p0
@pytest.mark.parametrize(("claim_ahead", "bound"), [(0, 2), (1, 4), (3, 8)])
def test_a_lane_never_holds_more_than_slots_times_one_plus_claim_ahead(
    worker_thread, settings, claim_ahead, bound
):
    settings.JOBQ = {**settings.JOBQ, "CLAIM_AHEAD": claim_ahead}
    ids = Job.objects.enqueue_many(NewJob("test.noop") for _ in range(600))
    worker = worker_thread({"default": 2}, burst=True)
    most = _most_held_while(worker)
    assert most <= bound
    if claim_ahead:
        assert most > 2, "short runs: the lane claimed ahead of its slots"
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE, attempts=1).count() == 600


def test_claimed_ahead_jobs_keep_claim_order_on_a_one_slot_lane(worker_thread, settings):
    settings.JOBQ = {**settings.JOBQ, "CLAIM_AHEAD": 4}
    jobs = [NewJob("test.record", priority=p) for p in (50, 10, 40, 20, 30) * 20]
    ids = Job.objects.enqueue_many(jobs)
    priority = dict(zip(ids, (job.priority for job in jobs), strict=True))
    worker = worker_thread({"default": 1}, burst=True)
    wait_until(worker.finished.is_set, timeout=60, message="worker drained")
    ran = [priority[job_id] for job_id in Execution.objects.order_by("id").values_list("job_id", flat=True)]
    assert len(ran) == 100 and ran == sorted(ran)


def _hold_one_running_and_three_ahead(extra_env: dict[str, str]):
    """A one-slot worker that has warmed up on short jobs, runs a long one and holds three claimed
    ahead behind it."""
    warm = Job.objects.enqueue_many(NewJob("test.noop", priority=1) for _ in range(20))
    long = Job.objects.enqueue("test.record", {"pause": 8}, priority=2)
    ahead = Job.objects.enqueue_many(NewJob("test.record", priority=3) for _ in range(3))
    env = {"JOBQ_CLAIM_AHEAD": "3", **extra_env}
    worker = start_worker("--queues", "default:1", "--worker-id", "ahead", env=env)
    try:
        wait_until(lambda: Execution.objects.filter(job_id=long).exists(), message="the long job started")
        wait_until(
            lambda: Job.objects.filter(id__in=ahead, status=JobStatus.RUNNING).count() == 3,
            message="three jobs claimed ahead",
        )
    except BaseException:
        worker.kill()
        worker.wait(10)
        raise
    assert Job.objects.filter(id__in=warm, status=JobStatus.DONE).count() == 20
    assert not Execution.objects.filter(job_id__in=ahead).exists()
    return worker, long, ahead


@pytest.mark.slow
@pytest.mark.p0
def test_sigterm_gives_claimed_ahead_jobs_back_at_once_without_using_an_attempt():
    worker, long, ahead = _hold_one_running_and_three_ahead({})
    try:
        worker.send_signal(signal.SIGTERM)
        wait_until(
            lambda: Job.objects.filter(id__in=ahead, status=JobStatus.PENDING).count() == 3,
            timeout=5,
            message="claimed-ahead jobs given back",
        )
        assert Job.objects.get(id=long).status == JobStatus.RUNNING  # still draining the long one
        for job in Job.objects.filter(id__in=ahead):
            assert (job.attempts, job.releases, job.worker_id, job.error_count) == (0, 0, None, 0)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    assert Job.objects.get(id=long).status == JobStatus.DONE
    assert not Execution.objects.filter(job_id__in=ahead).exists()


@pytest.mark.slow
@pytest.mark.p0
def test_sigkill_with_jobs_claimed_ahead_loses_none_and_runs_each_once():
    worker, long, ahead = _hold_one_running_and_three_ahead(FAST_LEASE)
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    assert Job.objects.filter(id__in=[long, *ahead], status=JobStatus.RUNNING).count() == 4
    reaped: set[int] = set()  # their leases expire one by one (each from its own claim or last beat)
    wait_until(lambda: reaped.update(Job.objects.reap()) or reaped == {long, *ahead}, message="lease expiry")
    rescuer = start_worker("--burst", "--worker-id", "rescuer", env=FAST_LEASE)
    assert rescuer.wait(60) == 0
    for job_id in ahead:
        job = Job.objects.get(id=job_id)
        assert (job.status, job.worker_id) == (JobStatus.DONE, "rescuer")
        assert Execution.objects.filter(job_id=job_id).count() == 1  # never started by the killed one
    assert Job.objects.get(id=long).status == JobStatus.DONE


@pytest.mark.p1
def test_release_unstarted_is_fenced_and_returns_the_attempt():
    job_id = Job.objects.enqueue("test.noop")
    job = Job.objects.claim("w1")
    assert Job.objects.release_unstarted("w2", [(job_id, job.fence)]) == []  # not the owner
    assert Job.objects.release_unstarted("w1", [(job_id, job.fence + 1)]) == []  # not this run
    assert Job.objects.release_unstarted("w1", [(job_id, job.fence)]) == [job_id]
    row = Job.objects.get(id=job_id)
    assert (row.status, row.attempts, row.releases, row.worker_id, row.started_at) == (
        JobStatus.PENDING, 0, 0, None, None,
    )  # fmt: skip
    assert row.run_at == job.run_at  # its place in the queue is kept
