"""JOBQ["MIDDLEWARE"] around real runs: every run of a sync or async task, of the native API and of
Django's Tasks API, goes through the middleware, outermost first; one that raises fails that job only."""

import pytest

from django_jobq.models import Job, JobStatus
from tests.conftest import wait_until
from tests.testapp import dtasks
from tests.testapp import middleware as recorded

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

OUTER, INNER, TIMING, BROKEN = (
    f"tests.testapp.middleware.{name}" for name in ("outer", "inner", "timing", "broken")
)


@pytest.fixture
def with_middleware(settings):
    def configure(*paths: str) -> None:
        settings.JOBQ = {**settings.JOBQ, "MIDDLEWARE": list(paths), "POLL_INTERVAL": 0.1}

    recorded.CALLS.clear()
    yield configure
    recorded.CALLS.clear()


def done(job_id: int) -> bool:
    return Job.objects.filter(id=job_id, status__in=[JobStatus.DONE, JobStatus.DEAD]).exists()


def seen(job_id: int) -> list[str]:
    return [name for name, seen_id, _ in recorded.CALLS if seen_id == job_id]


@pytest.mark.p1
def test_a_sync_run_goes_through_every_middleware_outermost_first(with_middleware, worker_thread):
    with_middleware(OUTER, INNER)
    worker_thread()
    job_id = Job.objects.enqueue("test.echo", {"n": 1})
    wait_until(lambda: done(job_id), message="the job ran")
    assert Job.objects.get(id=job_id).result == {"n": 1}
    assert seen(job_id) == ["outer:before", "inner:before", "inner:after", "outer:after"]
    assert ("outer:after", job_id, {"n": 1}) in recorded.CALLS  # the middleware saw the task's result


@pytest.mark.p1
def test_an_async_middleware_awaits_an_async_task(with_middleware, worker_thread):
    with_middleware(TIMING, OUTER)
    worker_thread()
    job_id = Job.objects.enqueue("test.async_add", {"a": 2, "b": 3})
    wait_until(lambda: done(job_id), message="the job ran")
    assert Job.objects.get(id=job_id).result == 5
    assert seen(job_id) == ["timing:before", "outer:before", "outer:after", "timing:after"]
    assert ("timing:after", job_id, 5) in recorded.CALLS


@pytest.mark.p1
def test_a_django_task_goes_through_the_middleware(with_middleware, worker_thread):
    with_middleware(OUTER)
    worker_thread()
    result = dtasks.add.enqueue(4, 5)
    job_id = int(result.id)
    wait_until(lambda: done(job_id), message="the job ran")
    assert Job.objects.get(id=job_id).status == JobStatus.DONE
    assert seen(job_id) == ["outer:before", "outer:after"]


@pytest.mark.p0
def test_a_middleware_that_raises_fails_that_job_only(with_middleware, worker_thread):
    with_middleware(OUTER, BROKEN)
    worker_thread({"default": 1})
    refused = Job.objects.enqueue("test.echo", {"break": True}, max_attempts=1)
    served = Job.objects.enqueue("test.echo", {"n": 2})
    wait_until(lambda: done(refused) and done(served), message="both ended")
    job = Job.objects.get(id=refused)
    assert job.status == JobStatus.DEAD and f"middleware refused job {refused}" in job.last_error
    assert Job.objects.get(id=served).status == JobStatus.DONE
