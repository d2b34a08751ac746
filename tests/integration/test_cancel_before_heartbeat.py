"""A cancel that reaches the database before the worker hears of it (its heartbeat is still to come):
the run's outcome follows what the database wrote. A failure is never retried in its slot, a result
is discarded and the run reported CANCELLED (log, signal, metrics), never as a success; an atomic
task's work rolls back."""

import pytest

from django_jobq import CancelOutcome, metrics, signals
from django_jobq.metrics import worker as worker_metrics
from django_jobq.models import Job, JobStatus
from tests.conftest import wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The heartbeat (which tells a run of its cancel) comes long after the run has seen it in its row.
SLOW_BEAT = {"LEASE_SECONDS": 120, "HEARTBEAT_SECONDS": 30, "POLL_INTERVAL": 0.2}


@pytest.fixture
def slow_beat(settings):
    settings.JOBQ = {**settings.JOBQ, **SLOW_BEAT}


def ended(job_id: int) -> Job:
    wait_until(
        lambda: Job.objects.filter(
            id=job_id, status__in=[JobStatus.DONE, JobStatus.DEAD, JobStatus.CANCELLED]
        ).exists(),
        message="the run ended",
    )
    return Job.objects.get(id=job_id)


def cancel_once_started(job_id: int) -> None:
    wait_until(lambda: Execution.objects.filter(job_id=job_id).exists(), message="the task started")
    assert Job.objects.cancel(job_id, by="ops") is CancelOutcome.CANCEL_REQUESTED


@pytest.fixture
def told():
    """The signals sent about runs, by kind."""
    seen: dict[str, list[int]] = {"succeeded": [], "cancelled": []}

    def succeeded(job, **kwargs):
        seen["succeeded"].append(job.id)

    def cancelled(job, **kwargs):
        seen["cancelled"].append(job.id)

    signals.job_succeeded.connect(succeeded, weak=False)
    signals.job_cancelled.connect(cancelled, weak=False)
    yield seen
    signals.job_succeeded.disconnect(succeeded)
    signals.job_cancelled.disconnect(cancelled)


@pytest.mark.p0
def test_a_failure_after_a_cancel_is_never_retried_in_its_slot(slow_beat, worker_thread):
    worker_thread({"default": 1})
    job_id = Job.objects.enqueue("test.fails_once_cancel_asked")
    cancel_once_started(job_id)
    job = ended(job_id)
    assert (job.status, job.attempts, job.cancelled_by) == (JobStatus.CANCELLED, 1, "ops")
    assert Execution.objects.filter(job_id=job_id).count() == 1  # attempt 2 never started


@pytest.mark.p0
def test_a_result_after_a_cancel_is_discarded_and_reported_cancelled_not_succeeded(
    slow_beat, worker_thread, told, caplog
):
    def counted(name: str) -> float:
        labels = {"queue": "default", "task": "test.returns_once_cancel_asked"}
        return metrics.REGISTRY.get_sample_value(f"{name}_total", labels) or 0.0

    worker_metrics.connect()
    before = {name: counted(name) for name in ("jobq_jobs_succeeded", "jobq_jobs_cancelled")}
    worker_thread({"default": 1})
    job_id = Job.objects.enqueue("test.returns_once_cancel_asked")
    cancel_once_started(job_id)
    job = ended(job_id)
    assert (job.status, job.result) == (JobStatus.CANCELLED, None)
    wait_until(lambda: job_id in told["cancelled"], message="job_cancelled was sent")
    assert job_id not in told["succeeded"]
    wait_until(lambda: counted("jobq_jobs_cancelled") == before["jobq_jobs_cancelled"] + 1, message="counted")
    assert counted("jobq_jobs_succeeded") == before["jobq_jobs_succeeded"]
    assert not [
        r for r in caplog.records if f"job {job_id} " in r.getMessage() and " done in " in r.getMessage()
    ]


@pytest.mark.p0
def test_an_atomic_task_cancelled_while_it_ran_rolls_its_work_back(slow_beat, worker_thread, told):
    worker_thread({"default": 1})
    job_id = Job.objects.enqueue("test.atomic_returns_once_cancel_asked")
    wait_until(lambda: Job.objects.filter(id=job_id, status=JobStatus.RUNNING).exists(), message="claimed")
    # the task's Execution row is in its own (uncommitted) transaction: ask the cancel once it runs
    wait_until(
        lambda: Job.objects.filter(id=job_id, started_at__isnull=False).exists(), message="the run started"
    )
    assert Job.objects.cancel(job_id, by="ops") is CancelOutcome.CANCEL_REQUESTED
    job = ended(job_id)
    assert (job.status, job.result) == (JobStatus.CANCELLED, None)
    assert "rolled back" in job.last_error
    assert not Execution.objects.filter(job_id=job_id).exists()  # the task's write went with it
    wait_until(lambda: job_id in told["cancelled"], message="job_cancelled was sent")
    assert job_id not in told["succeeded"]
