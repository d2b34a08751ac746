"""A job of a task its worker does not know (a rolling deploy: producers run newer code than some
workers) is given back without using an attempt, for a worker that knows it, with a warning once per
task name and a metric; only after JOBQ["UNKNOWN_TASK_GRACE"] since its enqueue does it go DEAD."""

import logging

import pytest

import django_jobq
from django_jobq import metrics
from django_jobq.metrics import worker as worker_metrics
from django_jobq.models import Job, JobStatus
from django_jobq.workflows import Signature, chain
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def refusals(task: str) -> float:
    labels = {"queue": "default", "task": task}
    return metrics.REGISTRY.get_sample_value("jobq_unknown_task_refusals_total", labels) or 0.0


@pytest.fixture
def lenient(settings):
    """The producer enqueues names this process does not register (its newer code knows them)."""
    settings.JOBQ = {**settings.JOBQ, "STRICT_TASKS": False}


@pytest.mark.p0
def test_a_job_of_a_task_deployed_later_waits_for_a_worker_that_knows_it_then_runs(
    lenient, worker_thread, caplog
):
    worker_metrics.connect()
    name = "test.deployed_later"
    before = refusals(name)
    flow = chain(Signature(name, {"n": 1}), Signature("test.noop", {})).enqueue(name="rolling deploy")
    first, then = flow.job_ids
    with caplog.at_level(logging.INFO, logger="django_jobq"):
        worker_thread({"default": 1})
        wait_until(lambda: refusals(name) >= before + 1, message="the worker gave the job back")
        job = Job.objects.get(id=first)
        assert (job.status, job.attempts, job.error_count) == (JobStatus.PENDING, 0, 0)
        assert Job.objects.get(id=then).status == JobStatus.WAITING  # its workflow goes on waiting
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING and name in r.getMessage()]
        assert len(warnings) == 1 and "knows no task" in warnings[0].getMessage()

        @django_jobq.task(name=name)  # the new code reaches this worker
        def deployed_later(n: int) -> int:
            return n + 1

        wait_until(lambda: Job.objects.filter(id=then, status=JobStatus.DONE).exists(), message="it ran")
    job = Job.objects.get(id=first)
    assert (job.status, job.attempts, job.result) == (JobStatus.DONE, 1, 2)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and name in r.getMessage()]
    assert len(warnings) == 1  # once per task name, however often it was given back


@pytest.mark.p0
def test_past_the_grace_a_job_of_an_unknown_task_goes_dead_with_a_clear_error(
    lenient, settings, worker_thread
):
    settings.JOBQ = {**settings.JOBQ, "UNKNOWN_TASK_GRACE": 0}
    job_id = Job.objects.enqueue("test.never_deployed", {})
    worker_thread({"default": 1})
    wait_until(lambda: Job.objects.filter(id=job_id, status=JobStatus.DEAD).exists(), message="DEAD")
    job = Job.objects.get(id=job_id)
    assert "no task is registered as 'test.never_deployed'" in job.last_error
    assert "UNKNOWN_TASK_GRACE" in job.last_error
    assert job.errors[-1]["class"] == "django_jobq.exceptions.UnknownTask"


@pytest.mark.parametrize("grace", [-1, "60", True, 10**9])
def test_a_bad_grace_is_refused(grace):
    from django_jobq.conf import JobqSettings
    from django_jobq.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="UNKNOWN_TASK_GRACE"):
        JobqSettings(unknown_task_grace=grace)
