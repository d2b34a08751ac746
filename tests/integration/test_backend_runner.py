"""Django tasks through real workers: the in-process Worker and ``jobq_worker`` subprocesses."""

import datetime as dt
import subprocess

import django
import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from django_jobq.backend import JobqBackend
from django_jobq.backend.compat import TaskResultStatus, task_finished, task_started
from django_jobq.models import Job, JobStatus
from django_jobq.testing import run_jobs
from django_jobq.worker import Worker
from tests.conftest import start_worker, wait_until
from tests.testapp import dtasks
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db(transaction=True)]


def run_burst(lanes=None, **options) -> Worker:
    worker = Worker(lanes or {"default": 2}, burst=True, **options)
    worker.run()
    return worker


def ran(label: str) -> int:
    return Execution.objects.filter(worker_id=label).count()


def test_sync_and_async_tasks_return_their_values():
    sync = dtasks.add.enqueue(2, b=3)
    asynchronous = dtasks.async_add.enqueue(4, 5)
    worker = run_burst()
    sync.refresh()
    asynchronous.refresh()
    assert sync.status == asynchronous.status == TaskResultStatus.SUCCESSFUL
    assert (sync.return_value, asynchronous.return_value) == (5, {"sum": 9})
    assert sync.worker_ids == [worker.worker_id] and sync.attempts == 1
    assert sync.started_at <= sync.finished_at and sync.last_attempted_at == sync.started_at
    assert ran("add:2+3") == 1


def test_a_failing_task_is_failed_after_its_attempts_with_each_error():
    result = dtasks.always_fails.enqueue("x")
    worker = run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert ran("fail:x") == 2  # max_attempts=2
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    assert all("ValueError: boom x" in e.traceback and "Traceback" in e.traceback for e in result.errors)
    assert result.worker_ids == [worker.worker_id] * 2 and result.attempts == 2
    assert Job.objects.get().status == JobStatus.DEAD  # a dead letter like any other


def test_a_flaky_task_succeeds_on_retry():
    result = dtasks.flaky.enqueue("f")
    worker = run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 2
    assert [e.exception_class_path for e in result.errors] == ["builtins.ConnectionError"]
    assert result.worker_ids == [worker.worker_id, worker.worker_id]


def test_priority_order_with_one_slot():
    for priority in (-50, 10, 90, 0):
        dtasks.record.using(priority=priority).enqueue(f"p{priority}")
    run_burst({"other": 1})
    order = list(Execution.objects.order_by("id").values_list("worker_id", flat=True))
    assert order == ["p90", "p10", "p0", "p-50"]


def test_run_after_is_respected(python_clock):
    later = timezone.now() + dt.timedelta(minutes=10)
    result = dtasks.add.using(run_after=later).enqueue(1, 1)
    assert result.task.run_after == later
    run_burst()
    assert ran("add:1+1") == 0 and dtasks.add.get_result(result.id).status == TaskResultStatus.READY
    assert dtasks.add.get_result(result.id).task.run_after == later
    with time_machine.travel(later + dt.timedelta(seconds=1)):
        run_burst()
    assert ran("add:1+1") == 1


def test_takes_context_sees_its_running_result():
    result = dtasks.with_context.enqueue("c")
    worker = run_burst()
    result.refresh()
    assert result.return_value == {
        "status": "RUNNING", "attempt": 1, "id": result.id, "worker_ids": [worker.worker_id],
    }  # fmt: skip


def test_a_rolled_back_enqueue_never_existed():
    with pytest.raises(RuntimeError), transaction.atomic():
        dtasks.add.enqueue(7, 7)
        raise RuntimeError("roll back")
    worker = run_burst()
    assert worker.processed == 0 and ran("add:7+7") == 0 and not Job.objects.exists()


def test_started_and_finished_signals_fire_in_the_worker():
    seen = []

    def on_started(sender, task_result, **kwargs):
        seen.append(("started", sender, task_result.id, task_result.status))

    def on_finished(sender, task_result, **kwargs):
        seen.append(("finished", sender, task_result.id, task_result.status))

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        ok = dtasks.add.enqueue(1, 2)
        run_burst({"default": 1})
        bad = dtasks.always_fails.enqueue("s")
        run_burst({"default": 1})
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    assert seen == [
        ("started", JobqBackend, ok.id, TaskResultStatus.RUNNING),
        ("finished", JobqBackend, ok.id, TaskResultStatus.SUCCESSFUL),
        ("started", JobqBackend, bad.id, TaskResultStatus.RUNNING),  # attempt 1 fails: retried
        ("started", JobqBackend, bad.id, TaskResultStatus.RUNNING),
        ("finished", JobqBackend, bad.id, TaskResultStatus.FAILED),  # the last attempt
    ]


def test_arguments_that_do_not_fit_go_dead_without_running():
    job_id = Job.objects.enqueue("tests.testapp.dtasks.add", {"args": [1, 2, 3], "kwargs": {}})
    run_burst()
    job = Job.objects.get(id=job_id)
    assert job.status == JobStatus.DEAD and job.attempts == 1 and "do not fit" in job.last_error
    assert not Execution.objects.exists()


# -- real jobq_worker processes -------------------------------------------------------------------
@pytest.mark.slow
def test_round_trip_through_a_worker_process():
    """The worker process imports tests.testapp.dtasks itself (no tasks.py names it)."""
    results = [dtasks.add.enqueue(i, 1) for i in range(5)] + [dtasks.async_add.enqueue(1, 1)]
    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.wait(timeout=60) == 0
    for result in results:
        result.refresh()
    assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * 6
    assert [r.return_value for r in results] == [1, 2, 3, 4, 5, {"sum": 2}]


@pytest.mark.slow
def test_a_forged_row_naming_a_callable_goes_dead_running_nothing(tmp_path):
    marker = tmp_path / "ran"
    forged = {
        "os.system": {"args": [f"touch {marker}"], "kwargs": {}},
        "subprocess.run": {"args": [["touch", str(marker)]], "kwargs": {}},
        "tests.testapp.dtasks._mark": {"args": ["forged"], "kwargs": {}},  # a plain function of an app
        "tests.testapp.dtasks.QUICK": {"args": [], "kwargs": {}},
        "tests.testapp.tasks.noop.func": {"args": [], "kwargs": {}},
    }
    ids = {name: Job.objects.create(task=name, payload=payload).id for name, payload in forged.items()}
    # no grace for names it does not know (else each waits an hour for a worker that knows it)
    worker = start_worker("--burst", stderr=subprocess.DEVNULL, env={"JOBQ_UNKNOWN_TASK_GRACE": "0"})
    assert worker.wait(timeout=60) == 0
    for name, job_id in ids.items():
        job = Job.objects.get(id=job_id)
        assert job.status == JobStatus.DEAD, name
        assert f"no task is registered as {name!r}" in job.last_error
    assert not marker.exists() and not Execution.objects.exists()


@pytest.mark.slow
def test_takes_context_in_a_worker_process():
    result = dtasks.with_context.enqueue("r")
    worker = start_worker("--concurrency", "1")
    try:
        wait_until(lambda: dtasks.with_context.get_result(result.id).is_finished, message="the task finished")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    result.refresh()
    assert (
        result.return_value["status"] == "RUNNING" and result.return_value["worker_ids"] == result.worker_ids
    )


def test_a_dead_django_task_is_a_dead_letter_like_any_other(admin_client):
    from django_jobq import dashboard

    result = dtasks.always_fails.enqueue("d")
    run_burst()
    job = Job.objects.get()
    assert job.status == JobStatus.DEAD
    groups = dashboard.dead_letter_groups()
    assert [(g.task, g.exception, g.jobs) for g in groups] == [
        ("tests.testapp.dtasks.always_fails", "ValueError", 1)
    ]
    page = admin_client.get(f"/admin/django_jobq/deadjob/{job.pk}/change/").content.decode()
    assert "tests.testapp.dtasks.always_fails" in page and "ValueError: boom d" in page
    assert Job.objects.requeue(job.id)
    assert dtasks.always_fails.get_result(result.id).status == TaskResultStatus.READY
    run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and ran("fail:d") == 4  # a fresh budget of 2
    assert len(result.errors) == len(result.worker_ids) == 4


def test_native_and_django_tasks_share_a_lane():
    native = Job.objects.enqueue("test.echo", {"n": 1})
    django_result = dtasks.add.enqueue(3, 4)
    worker = run_burst({"default": 1})
    assert worker.processed == 2
    assert Job.objects.get(id=native).result == {"n": 1}
    assert dtasks.add.get_result(django_result.id).return_value == 7


def test_a_retry_after_a_lost_worker_sees_every_attempt():
    """A first attempt whose worker vanished (lease expired, reaped) counts in worker_ids and errors."""
    result = dtasks.with_context.enqueue("lost")
    assert Job.objects.claim("ghost-worker") is not None
    Job.objects.filter(id=int(result.id)).update(lease_until=timezone.now() - dt.timedelta(seconds=1))
    assert Job.objects.reap() == [int(result.id)]
    worker = run_burst()
    result.refresh()
    assert result.return_value == {
        "status": "RUNNING", "attempt": 2, "id": result.id, "worker_ids": ["ghost-worker", worker.worker_id],
    }  # fmt: skip
    assert result.worker_ids == ["ghost-worker", worker.worker_id]
    assert [e.exception_class_path for e in result.errors] == ["django_jobq.exceptions.WorkerLost"]
    assert "lease expired" in result.errors[0].traceback


# -- what a run records, through the worker's own code on the test's connection (run_jobs) ----------
TASKS_LOGGER = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"  # the backport's name


@pytest.fixture
def finished_signals():
    seen = []

    def on_finished(sender, task_result, **kwargs):
        seen.append((task_result.status, [e.exception_class_path for e in task_result.errors]))

    task_finished.connect(on_finished)
    yield seen
    task_finished.disconnect(on_finished)


@pytest.mark.django_db
def test_a_failed_tasks_traceback_starts_at_its_function_and_ends_with_a_newline():
    result = dtasks.always_fails.using(max_attempts=1).enqueue("t")
    run_jobs()
    result.refresh()
    (error,) = result.errors
    assert error.traceback.startswith("Traceback (most recent call last):\n  File ")
    first = error.traceback.splitlines()[1]
    assert first.endswith(", in always_fails") and "dtasks.py" in first  # none of django-jobq's frames
    assert error.traceback.endswith("ValueError: boom t\n")  # as Django's own backends record it


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["SystemExit", "KeyboardInterrupt"])
def test_system_exit_is_a_failed_attempt_with_its_class_retried_per_policy(kind, finished_signals):
    result = dtasks.exits.enqueue(kind)
    run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.READY and finished_signals == []  # max_attempts=2: again
    Job.objects.filter(id=int(result.id)).update(run_at=timezone.now())  # its retry, due now
    run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [
        {"SystemExit": SystemExit}.get(kind, KeyboardInterrupt)
    ] * 2
    assert result.errors[-1].traceback.endswith(f"{kind}: {kind} in a task\n")
    assert finished_signals == [(TaskResultStatus.FAILED, [f"builtins.{kind}"] * 2)]


@pytest.mark.django_db
def test_a_return_value_that_is_not_json_fails_the_run_before_success_is_announced(finished_signals, caplog):
    result = dtasks.returns_a_function.enqueue()
    with caplog.at_level("DEBUG", logger=TASKS_LOGGER):
        run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError  # as Django's backends record it
    assert "Unsupported type" in result.errors[0].traceback
    assert finished_signals == [(TaskResultStatus.FAILED, ["builtins.TypeError"])]  # never SUCCESSFUL
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == TASKS_LOGGER]
    assert [level for level, _ in logged] == ["INFO", "ERROR"]  # started; finished, FAILED
    assert "state=FAILED" in logged[-1][1] and not any("SUCCESSFUL" in message for _, message in logged)


@pytest.mark.django_db
def test_a_return_value_takes_djangos_normal_form():
    result = dtasks.returns_bytes_and_a_tuple.enqueue()
    run_jobs()
    result.refresh()
    assert result.return_value == {"text": "café", "pair": [1, 2]}
