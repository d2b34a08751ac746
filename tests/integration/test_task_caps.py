"""@task(max_running=N) and max_running_per_key with enqueue(concurrency_key=...): never more RUNNING
jobs than the cap across worker processes; jobs over the cap wait without using up an attempt."""

import subprocess
import threading
import time

import pytest
from django.db import connection, connections

from django_jobq import InvalidJob
from django_jobq.exceptions import ConfigurationError
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.tasks import task
from tests.conftest import start_worker, wait_until
from tests.integration.test_queue_caps import stop_all

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class GroupSampler(threading.Thread):
    """RUNNING jobs per (task, concurrency_key), read every 10 ms: the largest figure of each group."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak: dict[tuple[str, str | None], int] = {}
        self.per_task: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT task, concurrency_key, count(*) FROM jobq_job WHERE status = 1 "
                        "GROUP BY task, concurrency_key"
                    )
                    rows = cursor.fetchall()
                totals: dict[str, int] = {}
                for task_name, key, n in rows:
                    self.peak[(task_name, key)] = max(self.peak.get((task_name, key), 0), n)
                    totals[task_name] = totals.get(task_name, 0) + n
                for task_name, n in totals.items():
                    self.per_task[task_name] = max(self.per_task.get(task_name, 0), n)
                time.sleep(0.01)
        finally:
            connections.close_all()


@pytest.mark.p0
@pytest.mark.slow
def test_task_and_per_key_caps_hold_across_four_worker_processes():
    Job.objects.enqueue_many(NewJob("test.capped") for _ in range(60))
    Job.objects.enqueue_many(
        NewJob("test.capped_per_key", concurrency_key=f"customer:{i % 3}") for i in range(60)
    )
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(100))
    sampler = GroupSampler()
    sampler.start()
    workers = [start_worker("--queues", "*:8", stderr=subprocess.DEVNULL) for _ in range(4)]
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == 220, timeout=120,
                   message="every job to finish")  # fmt: skip
    finally:
        sampler.stop.set()
        sampler.join()
        stop_all(workers)
    assert sampler.per_task.get("test.capped") == 2
    for i in range(3):
        assert sampler.peak.get(("test.capped_per_key", f"customer:{i}")) == 1
    assert sampler.per_task.get("test.capped_per_key", 0) <= 3
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}  # waiting spent no attempt


def test_bad_caps_and_keys_are_refused():
    for bad in (0, -1, True, "2", 10**7):
        with pytest.raises(ConfigurationError):
            task(name=f"test.bad_cap_{bad!s}", max_running=bad)(lambda: None)
        with pytest.raises(ConfigurationError):
            task(name=f"test.bad_key_cap_{bad!s}", max_running_per_key=bad)(lambda: None)
    for key in ("", "k\x00", "\ud800", 5):
        with pytest.raises(InvalidJob, match="concurrency_key"):
            Job.objects.enqueue("test.capped_per_key", concurrency_key=key)
    assert not Job.objects.exists()
