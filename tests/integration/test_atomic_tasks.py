"""@task(atomic=True): the task's own writes and its DONE commit together, fenced by the run."""

import signal
import subprocess

import pytest

from django_jobq.models import Job, JobStatus
from tests.conftest import start_worker, wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db(transaction=True)]


@pytest.mark.p0
def test_the_effects_and_done_commit_together(worker_thread):
    job_id = Job.objects.enqueue("test.atomic_record")
    worker_thread({"default": 1})
    job = Job.objects.wait_for(job_id, timeout=30)
    assert job.status == JobStatus.DONE and job.result == {"fence": 1}
    assert list(Execution.objects.values_list("job_id", "fence")) == [(job_id, 1)]


def test_a_failing_task_leaves_no_effect(worker_thread):
    job_id = Job.objects.enqueue("test.atomic_record", {"then": "raise"})
    worker_thread({"default": 1})
    job = Job.objects.wait_for(job_id, timeout=30)
    assert job.status == JobStatus.DEAD and "failed after its write" in job.last_error
    assert not Execution.objects.exists()


@pytest.mark.p0
def test_a_stale_run_rolls_its_effects_back(worker_thread):
    """Another worker took the job over while it ran: the run's writes roll back, nothing is DONE."""
    job_id = Job.objects.enqueue("test.atomic_record", {"then": "lose"})
    worker = worker_thread({"default": 1})
    wait_until(lambda: Job.objects.get(id=job_id).worker_id == "thief", message="the take-over")
    wait_until(lambda: not worker._running, message="the slot to give the job up")
    job = Job.objects.get(id=job_id)
    assert job.status == JobStatus.RUNNING and job.worker_id == "thief" and job.fence == 2
    assert not Execution.objects.exists()


@pytest.mark.serial  # kills a worker: never beside other database tests
@pytest.mark.p0
def test_sigkill_inside_the_task_after_its_writes_leaves_neither_effect_nor_done():
    job_id = Job.objects.enqueue("test.atomic_record", {"then": "die"})
    worker = start_worker("--queues", "default", stderr=subprocess.DEVNULL)
    try:
        assert worker.wait(timeout=60) == -signal.SIGKILL
    finally:
        if worker.poll() is None:
            worker.kill()
    job = Job.objects.get(id=job_id)
    assert job.status == JobStatus.RUNNING and job.fence == 1  # left to its lease and the reaper
    assert not Execution.objects.exists()
