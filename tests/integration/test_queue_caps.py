"""JOBQ["QUEUES"][q]["MAX_RUNNING"]: never more jobs of a queue running at once than its cap, across
worker processes, with named lanes and "*" lanes, and no seat kept by a dead worker past its lease.
Jobs claimed ahead wait in their worker without a seat, so what is counted is the job bodies running
(tests/occupancy.py), not the RUNNING rows."""

import json
import signal
import subprocess

import pytest
from django.db import connection

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import start_worker, wait_until
from tests.occupancy import peak

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CAPPED = {"capped": {"MAX_RUNNING": 2}}


def stop_all(workers):
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=60)


@pytest.mark.p0
@pytest.mark.slow
def test_a_cap_of_two_holds_across_four_worker_processes_of_eight_slots(tmp_path):
    log = str(tmp_path / "capped.log")
    Job.objects.enqueue_many(
        NewJob("test.occupy", {"log": log, "seconds": 0.02}, queue="capped") for _ in range(200)
    )
    Job.objects.enqueue_many(NewJob("test.noop", queue="free") for _ in range(200))
    env = {"JOBQ_QUEUES": json.dumps(CAPPED)}
    workers = [
        start_worker("--queues", lanes, env=env, stderr=subprocess.DEVNULL)
        for lanes in ("capped:8", "capped:8,free:2", "*:8", "*:8")
    ]
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == 400, timeout=120,
                   message="every job to finish")  # fmt: skip
    finally:
        stop_all(workers)
    assert peak(tmp_path / "capped.log") == (2, 200)  # the cap was used, never exceeded; each job ran once


def test_the_cap_holds_between_in_process_workers_and_other_lanes_keep_serving(
    settings, worker_thread, tmp_path
):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_RUNNING": 1}}}
    log = str(tmp_path / "capped.log")
    Job.objects.enqueue_many(
        NewJob("test.occupy", {"log": log, "seconds": 0.05}, queue="capped") for _ in range(10)
    )
    free = Job.objects.enqueue_many(NewJob("test.noop", queue="free") for _ in range(50))
    worker_thread({"capped": 4, "free": 1})
    worker_thread({"*": 4})
    wait_until(lambda: Job.objects.filter(id__in=free, status=JobStatus.DONE).count() == 50,
               message="the uncapped queue to drain")  # fmt: skip
    wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == 60, message="everything")
    assert peak(tmp_path / "capped.log") == (1, 10)


def seat_lease():
    """The lease of the one seat held (a queue capped at 1)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT lease_until FROM jobq_cap_seat WHERE holder IS NOT NULL")
        (until,) = cursor.fetchall()
        return until[0]


@pytest.mark.serial  # kills a worker or cuts its link: never beside other database tests
@pytest.mark.slow
def test_a_killed_capped_workers_seat_comes_free_once_its_lease_ran_out():
    env = {"JOBQ_QUEUES": json.dumps({"capped": {"MAX_RUNNING": 1}}), "JOBQ_LEASE_SECONDS": "2",
           "JOBQ_HEARTBEAT_SECONDS": "0.5", "JOBQ_POLL_INTERVAL": "0.2"}  # fmt: skip
    first = Job.objects.enqueue("test.slow_first_attempt", {"seconds": 60}, queue="capped")
    second = Job.objects.enqueue("test.noop", queue="capped")
    doomed = start_worker("--queues", "capped:2", env=env, stderr=subprocess.DEVNULL)
    survivor = None
    try:
        wait_until(lambda: Job.objects.get(id=first).status == JobStatus.RUNNING, message="the first run")
        survivor = start_worker("--queues", "capped:2", env=env, stderr=subprocess.DEVNULL)
        seat_until = seat_lease()  # the dead worker's seat is free from then at the earliest
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
        wait_until(lambda: Job.objects.reap() or Job.objects.get(id=first).status != JobStatus.RUNNING,
                   message="the reaper to return the dead worker's job")  # fmt: skip
        wait_until(lambda: Job.objects.filter(id__in=[first, second], status=JobStatus.DONE).count() == 2,
                   message="both jobs to finish")  # fmt: skip
    finally:
        for proc in (doomed, survivor):
            if proc is not None and proc.poll() is None:
                stop_all([proc])
    a, b = Job.objects.get(id=first), Job.objects.get(id=second)
    assert a.fence == 2  # run again after the kill (its rerun may come after the second job)
    assert b.finished_at <= a.started_at or b.started_at >= a.finished_at  # one at a time, all along
    assert "lease expired" in a.errors[0]["error"] and b.fence == 1
    assert b.started_at >= seat_until  # its seat came free only once its lease ran out
