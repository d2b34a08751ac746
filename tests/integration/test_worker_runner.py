"""What a slot records of a failed run (worker/classify.py: format_error, the exception's class): the
traceback from the task's call, as Python prints it, and the class of whatever the task raised."""

import re

import pytest

from django_jobq.models import Job, JobStatus
from django_jobq.testing import run_jobs
from django_jobq.worker import Worker
from tests.testapp import testing_tasks as t

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

MIDDLEWARE = "tests/testapp/middleware.py"
TASKS = "tests/testapp/testing_tasks.py"


def frames(traceback: str) -> list[tuple[str, str]]:
    """(file, function) of each frame of a stored traceback, outermost first."""
    return re.findall(r'^  File "([^"]+)", line \d+, in (\S+)$', traceback, re.MULTILINE)


def stored_error(job_id: int) -> str:
    run_jobs()
    return Job.objects.get(id=job_id).last_error


@pytest.mark.parametrize("task", [t.fails, t.async_fails])
def test_a_stored_traceback_starts_at_the_tasks_call_and_ends_as_python_prints_it(task):
    error = stored_error(task.enqueue(reason="card declined"))
    assert error.startswith("Traceback (most recent call last):\n")
    assert error.endswith("ValueError: card declined\n")  # with its newline, as Python prints it
    (first, *_) = frames(error)
    assert first[0].endswith(TASKS) and first[1] == task.func.__name__  # no slot or event loop frame


@pytest.mark.parametrize(("middleware", "task"), [("outer", t.fails), ("timing", t.async_fails)])
def test_a_middleware_wrapped_traceback_starts_at_the_middleware(settings, middleware, task):
    settings.JOBQ = {**settings.JOBQ, "MIDDLEWARE": [f"tests.testapp.middleware.{middleware}"]}
    calls = frames(stored_error(task.enqueue()))
    assert calls[0][0].endswith(MIDDLEWARE) and calls[0][1] == middleware
    assert calls[-1][0].endswith(TASKS) and calls[-1][1] == task.func.__name__


def test_a_failure_of_the_run_itself_keeps_its_whole_traceback():
    job_id = t.add.enqueue(a=1, b=2)
    Job.objects.filter(id=job_id).update(payload={"a": 1})  # no longer fits add(a, b)
    error = stored_error(job_id)
    assert "PayloadMismatch" in error and frames(error)


@pytest.mark.parametrize("kind", ["SystemExit", "KeyboardInterrupt"])
def test_system_exit_and_keyboard_interrupt_fail_the_attempt_with_their_class(kind):
    job_id = t.exits.enqueue(kind=kind)
    (run,) = run_jobs()
    assert run.status == JobStatus.PENDING  # a failed attempt like any other: retried per the policy
    job = Job.objects.get(id=job_id)
    assert [e["class"] for e in job.errors] == [f"builtins.{kind}"]
    assert job.last_error.endswith(f"{kind}: {kind} in a task\n")


@pytest.mark.django_db(transaction=True)
def test_system_exit_in_a_task_stops_neither_the_slot_nor_the_worker():
    exits = [t.exits.enqueue(kind=kind) for kind in ("SystemExit", "KeyboardInterrupt")]
    after = t.add.enqueue(a=2, b=3)
    Worker({"default": 1}, burst=True).run()  # returns once nothing is due
    jobs = {job.id: job for job in Job.objects.all()}
    assert jobs[after].status == JobStatus.DONE and jobs[after].result == 5  # run by the same one slot
    assert [jobs[i].errors[0]["class"] for i in exits] == [
        "builtins.SystemExit",
        "builtins.KeyboardInterrupt",
    ]
    assert all(jobs[i].status == JobStatus.PENDING for i in exits)  # retries due later
