"""Real worker processes killed, drained and cut off from the database. These tests start
subprocesses, kill them or restart PostgreSQL; they never run alongside other database tests."""

import datetime as dt
import signal
import subprocess
import sys
import time

import pytest
import time_machine
from django.db import connection

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.reaper import LEASE_NAME, Reaper
from tests.conftest import child_env, start_worker, wait_until
from tests.servers import pgcluster
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

FAST_LEASE = {"JOBQ_LEASE_SECONDS": "2", "JOBQ_HEARTBEAT_SECONDS": "0.5", "JOBQ_POLL_INTERVAL": "0.2"}


def stop(proc: subprocess.Popen, sig=signal.SIGTERM, timeout=30) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    return proc.wait(timeout=timeout)


@pytest.mark.p0
def test_sigkill_mid_job_is_recovered_by_the_reaper_and_finished_once():
    jid = Job.objects.enqueue("test.slow_first_attempt", {"seconds": 60})
    doomed = start_worker("--worker-id", "doomed", env=FAST_LEASE)
    try:
        wait_until(lambda: Execution.objects.filter(job_id=jid).exists(), message="first attempt running")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
    finally:
        stop(doomed, signal.SIGKILL)
    assert Job.objects.get(id=jid).status == JobStatus.RUNNING  # nobody has released it
    assert Job.objects.reap() == []  # not before its lease expires ...
    reaped = wait_until(Job.objects.reap, timeout=10, message="lease expiry")  # ... then at once
    assert reaped == [jid]
    rescuer = start_worker("--burst", "--worker-id", "rescuer", env=FAST_LEASE)
    assert rescuer.wait(30) == 0
    job = Job.objects.get(id=jid)
    assert (job.status, job.attempts, job.worker_id, job.result) == (
        JobStatus.DONE,
        2,
        "rescuer",
        {"attempt": 2},
    )
    assert Job.objects.filter(status=JobStatus.DONE).count() == 1
    # The dead worker's late writes are refused.
    assert Job.objects.complete(jid, "doomed", "late", fence=1) is False
    assert Job.objects.fail(jid, "doomed", "late", fence=1) is None


@pytest.mark.p0
def test_sigterm_drains_then_releases_what_outlives_the_grace_period():
    long_job = Job.objects.enqueue("test.slow_first_attempt", {"seconds": 60})
    short_job = Job.objects.enqueue("test.record", {"pause": 1.0})
    env = {"JOBQ_LEASE_SECONDS": "120", "JOBQ_HEARTBEAT_SECONDS": "1"}
    worker = start_worker("--concurrency", "2", "--grace", "2", "--worker-id", "draining", env=env)
    try:
        wait_until(lambda: Execution.objects.count() == 2, message="both jobs running")
        signalled = time.monotonic()
        assert stop(worker) == 0
        stopped_after = time.monotonic() - signalled
    finally:
        stop(worker, signal.SIGKILL)
    assert stopped_after < 10  # grace 2 s, not the 60 s job nor the 120 s lease
    assert Job.objects.get(id=short_job).status == JobStatus.DONE  # finished within the grace period
    released = Job.objects.get(id=long_job)
    assert (
        released.status == JobStatus.PENDING and released.worker_id is None
    )  # released, not left to the reaper
    assert "released" in released.errors[-1]["error"]
    again = start_worker("--burst", "--worker-id", "next", env=env)
    assert again.wait(30) == 0
    assert Job.objects.get(id=long_job).status == JobStatus.DONE
    assert Job.objects.get(id=long_job).worker_id == "next"


@pytest.mark.p0
def test_poison_job_goes_dead_and_the_pool_recovers():
    poison = Job.objects.enqueue("test.exit_process")  # max_attempts=2
    normal = Job.objects.enqueue_many(NewJob("test.noop", priority=200) for _ in range(20))
    deaths = 0
    for _ in range(6):  # a supervisor (systemd, Kubernetes) restarting the worker
        worker = start_worker("--burst", "--concurrency", "1", env=FAST_LEASE)
        code = worker.wait(60)
        if code == 0:
            break
        deaths += 1
        wait_until(lambda: Job.objects.reap() or Job.objects.get(id=poison).status != JobStatus.RUNNING,
                   timeout=10, message="lease expiry of the poison job")  # fmt: skip
    assert deaths == 2  # one death per attempt, then never again
    job = Job.objects.get(id=poison)
    assert job.status == JobStatus.DEAD and job.attempts == 2 and "lease expired" in job.last_error
    assert Job.objects.filter(id__in=normal, status=JobStatus.DONE).count() == 20


@pytest.mark.p0
@pytest.mark.skipif(pgcluster.restart_problem() is not None, reason=str(pgcluster.restart_problem()))
def test_workers_survive_a_postgresql_restart_and_finish_every_job_once():
    total = 1200
    ids = Job.objects.enqueue_many(NewJob("test.record", {"pause": 0.004}) for _ in range(total))
    env = {"JOBQ_LEASE_SECONDS": "30", "JOBQ_HEARTBEAT_SECONDS": "1", "JOBQ_POLL_INTERVAL": "0.2"}
    workers = [start_worker("--concurrency", "4", "--worker-id", f"survivor-{n}", env=env) for n in range(2)]
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() > total // 5, timeout=60)
        pgcluster.restart("fast")
        assert all(w.poll() is None for w in workers)  # the restart killed no worker
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == total, timeout=120,
                   interval=0.5, message="every job DONE after the restart")  # fmt: skip
        assert all(w.poll() is None for w in workers)
    finally:
        for w in workers:
            stop(w)
    assert sorted(Job.objects.filter(status=JobStatus.DONE).values_list("id", flat=True)) == sorted(ids)
    done_by = dict(Job.objects.values_list("id", "worker_id"))
    assert set(done_by.values()) <= {"survivor-0", "survivor-1"}
    # At-least-once: a job whose DONE write was lost with the connection may have run again, and then
    # only under a new fence; never two executions of one run.
    runs = list(Execution.objects.values_list("job_id", "fence"))
    assert len(runs) == len(set(runs))
    assert {job_id for job_id, _ in runs} == set(ids)


@pytest.mark.p0
def test_reaper_singleton_takes_over_when_the_acting_one_stops_renewing(python_clock):
    first, second = Reaper(interval=1), Reaper(interval=1)
    with time_machine.travel(dt.datetime(2026, 2, 1, tzinfo=dt.UTC), tick=False) as clock:
        assert first.acquire() is True
        assert second.acquire() is False  # one acts, the other stands by
        clock.shift(first.lease_seconds - 1)
        assert first.acquire() is True  # and keeps acting, renewing its lease
        clock.shift(first.lease_seconds - 1)
        assert second.acquire() is False
        clock.shift(2)  # the holder hung or vanished: its lease ran out
        assert second.acquire() is True
        assert first.acquire() is False
        second.release()  # a clean stop hands the role over at once
        assert first.acquire() is True


def _lock_holders() -> list[int]:
    """Pids of the processes holding an unexpired reaper lease."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT holder FROM jobq_lease WHERE name = %s AND expires_at > now()", [LEASE_NAME])
        return [int(row[0].split(":")[1]) for row in cursor.fetchall()]


def _reaper_process() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "django", "jobq_reap", "--interval", "0.1"],
        env=child_env(**FAST_LEASE),
        text=True,
    )


@pytest.mark.p0
def test_reaper_processes_one_acts_and_the_standby_takes_over_after_sigkill():
    first = _reaper_process()
    second = None
    try:
        holder = wait_until(_lock_holders, message="first reaper acting")
        second = _reaper_process()
        time.sleep(1.0)  # the standby has tried for ten intervals
        assert _lock_holders() == holder  # still exactly one, the same
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        takeover = wait_until(
            lambda: [p for p in _lock_holders() if p not in holder], timeout=15, message="takeover"
        )
        assert len(takeover) == 1 and second.poll() is None
        # The standby acts now: a backlog of expired leases is cleared.
        Job.objects.enqueue_many(NewJob("test.noop") for _ in range(120))
        Job.objects.claim_batch("gone", 200, lease_seconds=0.2)
        wait_until(lambda: Job.objects.counts()["PENDING"] == 120, timeout=10, message="backlog reaped")
    finally:
        stop(first, signal.SIGKILL)
        if second is not None:
            stop(second)


def test_reaper_pass_clears_a_backlog_and_prunes(python_clock):
    with time_machine.travel(dt.datetime(2026, 2, 1, tzinfo=dt.UTC), tick=False) as clock:
        Job.objects.enqueue_many(NewJob("test.noop") for _ in range(130))
        Job.objects.claim_batch("gone", 200, lease_seconds=5)
        clock.shift(10)
        reaper = Reaper()
        assert len(reaper.run_once().reaped) == 130  # the whole backlog in one pass
        finished = Job.objects.claim_batch("w", 200, lease_seconds=30 * 24 * 3600)
        for job in finished[:100]:
            Job.objects.complete(job.id, "w")
        clock.shift(8 * 24 * 3600)  # past the 7-day DONE retention
        result = reaper.run_once()
    assert result.pruned_done == 100 and result.reaped == []
    assert Job.objects.counts() == {
        "PENDING": 0,
        "RUNNING": 30,
        "DONE": 0,
        "DEAD": 0,
        "CANCELLED": 0,
        "WAITING": 0,
    }  # never pruned
