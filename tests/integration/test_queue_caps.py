"""JOBQ["QUEUES"][q]["MAX_RUNNING"]: never more RUNNING jobs of a queue than its cap, across worker
processes, with named lanes and "*" lanes, and no slot kept by a dead worker past its lease."""

import datetime as dt
import json
import signal
import subprocess
import threading
import time

import pytest
from django.db import connection, connections

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import start_worker, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CAPPED = {"capped": {"MAX_RUNNING": 2}}


def running(queue: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobq_job WHERE status = 1 AND queue = %s", [queue])
        return cursor.fetchone()[0]


class Sampler(threading.Thread):
    """RUNNING jobs of a queue, read every 10 ms on a connection of its own."""

    def __init__(self, queue: str):
        super().__init__(daemon=True)
        self.queue, self.samples, self.stop = queue, [], threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                self.samples.append(running(self.queue))
                time.sleep(0.01)
        finally:
            connections.close_all()


def stop_all(workers):
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=60)


@pytest.mark.p0
@pytest.mark.slow
def test_a_cap_of_two_holds_across_four_worker_processes_of_eight_slots():
    Job.objects.enqueue_many(NewJob("test.sleep", {"seconds": 0.02}, queue="capped") for _ in range(200))
    Job.objects.enqueue_many(NewJob("test.noop", queue="free") for _ in range(200))
    env = {"JOBQ_QUEUES": json.dumps(CAPPED)}
    sampler = Sampler("capped")
    sampler.start()
    workers = [
        start_worker("--queues", lanes, env=env, stderr=subprocess.DEVNULL)
        for lanes in ("capped:8", "capped:8,free:2", "*:8", "*:8")
    ]
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == 400, timeout=120,
                   message="every job to finish")  # fmt: skip
    finally:
        sampler.stop.set()
        sampler.join()
        stop_all(workers)
    assert max(sampler.samples) == 2  # the cap was used, never exceeded
    assert len(sampler.samples) > 50


def test_the_cap_holds_between_in_process_workers_and_other_lanes_keep_serving(settings, worker_thread):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_RUNNING": 1}}}
    Job.objects.enqueue_many(NewJob("test.sleep", {"seconds": 0.05}, queue="capped") for _ in range(10))
    free = Job.objects.enqueue_many(NewJob("test.noop", queue="free") for _ in range(50))
    sampler = Sampler("capped")
    sampler.start()
    worker_thread({"capped": 4, "free": 1})
    worker_thread({"*": 4})
    try:
        wait_until(lambda: Job.objects.filter(id__in=free, status=JobStatus.DONE).count() == 50,
                   message="the uncapped queue to drain")  # fmt: skip
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == 60, message="everything")
    finally:
        sampler.stop.set()
        sampler.join()
    assert max(sampler.samples) == 1


@pytest.mark.serial  # kills a worker or cuts its link: never beside other database tests
@pytest.mark.slow
def test_a_killed_capped_worker_frees_its_slot_once_its_job_is_reaped():
    env = {"JOBQ_QUEUES": json.dumps({"capped": {"MAX_RUNNING": 1}}), "JOBQ_LEASE_SECONDS": "2",
           "JOBQ_HEARTBEAT_SECONDS": "0.5", "JOBQ_POLL_INTERVAL": "0.2"}  # fmt: skip
    first = Job.objects.enqueue("test.slow_first_attempt", {"seconds": 60}, queue="capped")
    second = Job.objects.enqueue("test.noop", queue="capped")
    doomed = start_worker("--queues", "capped:2", env=env, stderr=subprocess.DEVNULL)
    survivor = None
    try:
        wait_until(lambda: Job.objects.get(id=first).status == JobStatus.RUNNING, message="the first run")
        survivor = start_worker("--queues", "capped:2", env=env, stderr=subprocess.DEVNULL)
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
    reaped_at = dt.datetime.fromisoformat(a.errors[0]["at"])  # the reaper recorded when it returned it
    assert "lease expired" in a.errors[0]["error"] and b.started_at >= reaped_at and b.fence == 1
