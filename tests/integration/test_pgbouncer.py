"""Workers, the reaper and wait_for through a real PgBouncer in transaction mode (Debian's
``pgbouncer``, started on a free local port for this module): NOTIFY wake-ups over a direct LISTEN
connection (JOBQ["LISTEN_DATABASE"]), polling only, and a SIGKILLed worker's jobs recovered, with no
session state left on the pooler's server connections."""

import json
import signal
import subprocess
import sys

import psycopg
import pytest
from django.db import connection

from bench import pgbouncer as bouncer
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, MaintenanceLease
from django_jobq.reaper import LEASE_NAME
from tests.conftest import ROOT, child_env, start_worker, wait_until
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        bouncer.binary() is None, reason="pgbouncer is not installed (apt-get install pgbouncer)"
    ),
]

JOBS = 2000
FAST_LEASE = {"JOBQ_LEASE_SECONDS": "2", "JOBQ_HEARTBEAT_SECONDS": "0.5"}


@pytest.fixture(scope="module")
def pooler():
    """A PgBouncer in transaction mode in front of the test server (DATABASE_URL's host, port and user,
    so a server on another port than 5432 is the one pooled), for this module."""
    db = connection.settings_dict
    running = bouncer.PgBouncer(
        host=db["HOST"] or "127.0.0.1",
        port=int(db["PORT"] or 5432),
        user=db["USER"] or "postgres",
        pool_size=4,
    ).start()
    yield running
    running.stop()


def pooled(pooler, **extra: str) -> dict[str, str]:
    """Environment for a process whose queue connections go through the pooler (tests.settings.pooled)."""
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings.pooled",
        "JOBQ_POOLER_URL": pooler.url(connection.settings_dict["NAME"]),
        **extra,
    }


def manage(command: str, *args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "django", command, *args], env=child_env(**env), cwd=ROOT, text=True
    )


def stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def direct_listeners() -> int:
    """Sessions of this database that LISTEN under the worker's name on a connection of their own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'jobq-listener' AND query LIKE 'LISTEN%%'"
        )
        return cursor.fetchone()[0]


def server_settings(pooler, times: int = 12) -> set[tuple[str, str]]:
    """(statement_timeout, lock_timeout) as fresh clients of the pooler see them: whatever server
    connection each gets, it must not carry a setting another client left on it."""
    seen = set()
    for _ in range(times):
        with psycopg.connect(pooler.url(connection.settings_dict["NAME"]), autocommit=True) as conn:
            seen.add(
                conn.execute(
                    "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
                ).fetchone()
            )
    return seen


def defaults() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reset_val FROM pg_settings WHERE name IN ('statement_timeout', 'lock_timeout') ORDER BY name DESC"
        )
        return tuple(row[0] for row in cursor.fetchall())


def where_things_stand() -> str:
    """For a run that stalls: the jobs not DONE, the advisory locks, and the sessions of this database."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, status, fence, worker_id FROM jobq_job WHERE status <> %s", [JobStatus.DONE]
        )
        jobs = cursor.fetchall()
        cursor.execute(
            "SELECT l.pid, l.mode, l.granted, a.application_name FROM pg_locks l LEFT JOIN pg_stat_activity a "
            "USING (pid) WHERE l.locktype = 'advisory' AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        locks = cursor.fetchall()
        cursor.execute(
            "SELECT pid, application_name, state, left(query, 80) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        sessions = cursor.fetchall()
    return f"\njobs not DONE: {jobs}\nadvisory locks: {locks}\nsessions: {sessions}"


@pytest.mark.p0
def test_worker_and_reaper_drain_2000_jobs_through_pgbouncer_woken_by_notify_on_a_direct_connection(pooler):
    # A one-hour poll: only the NOTIFY, received on the direct LISTEN connection, wakes the worker in time.
    env = pooled(pooler, JOBQ_POLL_INTERVAL="3600")
    worker = manage("jobq_worker", "--concurrency", "4", "--worker-id", "pooled", env=env)
    reaper = manage("jobq_reap", env=env)
    try:
        wait_until(lambda: direct_listeners() == 1, message="the worker's LISTEN on its direct connection")
        wait_until(
            lambda: MaintenanceLease.objects.filter(name=LEASE_NAME).exists(), message="the reaper's lease"
        )
        Job.objects.enqueue_many(NewJob("test.noop", {"n": n}) for n in range(JOBS))
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == JOBS, timeout=180, interval=0.2,
                   message=f"{JOBS} jobs DONE")  # fmt: skip
        # wait_for from another process through the pooler: the completion NOTIFY arrives on the direct
        # LISTEN_DATABASE connection (its poll is an hour).
        waiter = subprocess.run([sys.executable, "-m", "tests.procs.pooled_waiter"], env=child_env(**env), cwd=ROOT,
                                capture_output=True, text=True, timeout=150)  # fmt: skip
        assert waiter.returncode == 0, waiter.stderr[-3000:] + where_things_stand()
        assert json.loads(waiter.stdout) == {"status": JobStatus.DONE, "result": {"through": "pgbouncer"}}
        assert worker.poll() is None and reaper.poll() is None
        holder = MaintenanceLease.objects.get(name=LEASE_NAME).holder
    finally:
        stop(worker, reaper)
    assert worker.returncode == 0 and reaper.returncode == 0
    assert Job.objects.filter(worker_id="pooled", status=JobStatus.DONE).count() == JOBS + 1
    assert holder  # the reaper's singleton is a lease row, written through the pooler
    # No statement_timeout / lock_timeout left behind on the pooler's server connections.
    assert server_settings(pooler) == {defaults()}


@pytest.mark.p0
def test_worker_and_reaper_drain_2000_jobs_through_pgbouncer_polling_only(pooler):
    env = pooled(pooler, JOBQ_NOTIFY="0", JOBQ_POLL_INTERVAL="0.2")
    worker = manage("jobq_worker", "--concurrency", "4", "--worker-id", "polling", env=env)
    reaper = manage("jobq_reap", env=env)
    try:
        Job.objects.enqueue_many(NewJob("test.noop", {"n": n}) for n in range(JOBS))
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == JOBS, timeout=180, interval=0.2,
                   message=f"{JOBS} jobs DONE")  # fmt: skip
        assert worker.poll() is None and reaper.poll() is None
    finally:
        stop(worker, reaper)
    assert worker.returncode == 0 and reaper.returncode == 0
    assert Job.objects.filter(worker_id="polling", status=JobStatus.DONE).count() == JOBS
    assert server_settings(pooler) == {defaults()}


@pytest.mark.serial  # kills a worker or cuts its link: never beside other database tests
@pytest.mark.p0
def test_sigkilled_worker_jobs_are_recovered_through_pgbouncer(pooler):
    jid = Job.objects.enqueue("test.slow_first_attempt", {"seconds": 60})
    env = pooled(pooler, JOBQ_POLL_INTERVAL="0.2", **FAST_LEASE)
    doomed = start_worker("--worker-id", "doomed", env=env)
    started = [doomed]
    try:
        wait_until(lambda: Execution.objects.filter(job_id=jid).exists(), message="first attempt running")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        assert Job.objects.get(id=jid).status == JobStatus.RUNNING  # nobody released it
        started.append(manage("jobq_reap", env=env))
        wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.PENDING, timeout=30,
                   message="the reaper returning the job")  # fmt: skip
        started.append(rescuer := start_worker("--burst", "--worker-id", "rescuer", env=env))
        assert rescuer.wait(60) == 0
    finally:
        stop(*started)  # none is left running, whatever failed
    job = Job.objects.get(id=jid)
    assert (job.status, job.attempts, job.worker_id, job.result) == (
        JobStatus.DONE,
        2,
        "rescuer",
        {"attempt": 2},
    )
    assert "lease expired" in job.errors[-1]["error"]
    assert Job.objects.complete(jid, "doomed", "late", fence=1) is False  # the dead worker's write is refused
