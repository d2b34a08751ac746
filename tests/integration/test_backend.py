"""JobqBackend's public methods against a real PostgreSQL: enqueue, get_result, refresh, validation."""

import asyncio
import dataclasses
import datetime as dt

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobq.backend import JobqBackend, JobqTask, UnknownTaskOption, jobq_priority
from django_jobq.backend.compat import (
    FORWARDS_TASK_OPTIONS,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
)
from django_jobq.exceptions import (
    ArgumentsNotJSON,
    DedupeKeyConflict,
    JobqError,
    PayloadMismatch,
    PayloadTooLarge,
)
from django_jobq.models import Job, JobStatus
from django_jobq.notify.listener import connection_params
from django_jobq.registry import find_task
from tests.testapp import dtasks

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db(transaction=True)]


def backend() -> JobqBackend:
    return task_backends["default"]


def test_capabilities_and_task_class():
    b = backend()
    assert isinstance(b, JobqBackend)
    assert (b.supports_defer, b.supports_async_task, b.supports_get_result, b.supports_priority) == (
        True, True, True, True,
    )  # fmt: skip
    assert isinstance(dtasks.add, JobqTask)


def test_enqueue_writes_one_row_with_the_mapped_options():
    later = timezone.now() + dt.timedelta(hours=1)
    result = dtasks.add.using(priority=30, queue_name="emails", run_after=later).enqueue(2, b=3)
    job = Job.objects.get()
    assert result.id == str(job.id)
    assert (job.task, job.queue, job.priority, job.status) == (
        "tests.testapp.dtasks.add", "emails", 70, JobStatus.PENDING,
    )  # fmt: skip
    assert job.payload == {"args": [2], "kwargs": {"b": 3}}
    assert job.run_at == later
    assert job.max_attempts == 3  # OPTIONS["MAX_ATTEMPTS"]
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([2], {"b": 3}, "default")


def test_priority_defaults_coincide():
    assert jobq_priority(0) == 100 and jobq_priority(100) == 0 and jobq_priority(-100) == 200
    dtasks.add.enqueue(1, 1)
    assert Job.objects.get().priority == 100


def test_task_options_reach_the_row():
    dtasks.always_fails.enqueue("x")
    assert Job.objects.get().max_attempts == 2
    assert find_task("tests.testapp.dtasks.always_fails").retry is dtasks.QUICK


@pytest.mark.skipif(not FORWARDS_TASK_OPTIONS, reason="Django 6.0's @task does not pass options on")
def test_djangos_own_decorator_passes_jobq_options_on():
    dtasks.forwarded.enqueue()
    assert Job.objects.get().max_attempts == 7
    assert find_task("tests.testapp.dtasks.forwarded").timeout == 9


def test_enqueue_joins_the_callers_transaction_and_notifies_on_commit(a_worker_waits):
    with psycopg.connect(**connection_params("default"), autocommit=True) as listen:
        listen.execute("LISTEN jobq")
        with pytest.raises(RuntimeError), transaction.atomic():
            result = dtasks.add.enqueue(1, 2)
            assert Job.objects.filter(id=int(result.id)).exists()
            assert list(listen.notifies(timeout=0.3)) == []  # not before the commit
            raise RuntimeError("roll back")
        assert not Job.objects.exists()
        with pytest.raises(TaskResultDoesNotExist):
            backend().get_result(result.id)
        assert list(listen.notifies(timeout=0.3)) == []
        with transaction.atomic():
            dtasks.add.enqueue(1, 2)
        assert [n.payload for n in listen.notifies(timeout=2, stop_after=1)] == ["default"]


def test_non_json_arguments_are_a_type_error_and_write_nothing():
    with pytest.raises(TypeError) as caught:
        dtasks.add.enqueue(object(), 1)
    assert isinstance(caught.value, ArgumentsNotJSON)
    with pytest.raises(TypeError):
        dtasks.add.enqueue(1, b=float("nan"))
    assert not Job.objects.exists()


def test_non_json_arguments_are_refused_in_djangos_words_and_normalised_as_django_does():
    with pytest.raises(ArgumentsNotJSON, match=r"Unsupported type: <class 'datetime\.datetime'>"):
        dtasks.add.enqueue(timezone.now(), 1)
    result = dtasks.add.enqueue(b"caf\xc3\xa9", b=(1, 2))  # as Django's TaskResult normalises them
    assert Job.objects.get().payload == {"args": ["café"], "kwargs": {"b": [1, 2]}}
    assert backend().get_result(result.id) == result


def test_a_waiting_tasks_result_reads_ready():
    first = dtasks.add.enqueue(1, 1)
    waiting = Job.objects.enqueue(
        "tests.testapp.dtasks.add", {"args": [2, 2], "kwargs": {}}, depends_on=[int(first.id)]
    )
    assert Job.objects.get(id=waiting).status == JobStatus.WAITING
    result = dtasks.add.get_result(str(waiting))
    assert result.status == TaskResultStatus.READY and not result.is_finished


def test_arguments_that_do_not_fit_the_function_are_refused_at_enqueue():
    with pytest.raises(PayloadMismatch, match="do not fit"):
        dtasks.add.enqueue(1, 2, 3)
    with pytest.raises(PayloadMismatch):
        dtasks.with_context.enqueue()  # label missing (the context is the worker's)
    assert not Job.objects.exists()


def test_an_oversized_payload_stays_a_jobq_error(settings):
    settings.JOBQ = {**settings.JOBQ, "MAX_PAYLOAD_BYTES": 64}
    with pytest.raises(PayloadTooLarge):
        dtasks.add.enqueue("x" * 100, 1)
    assert not Job.objects.exists()


def test_get_result_and_refresh_follow_the_row():
    result = dtasks.add.enqueue(2, 3)
    fetched = backend().get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.task.func is dtasks.add.func
    assert fetched.enqueued_at is not None and fetched.worker_ids == [] and fetched.attempts == 0
    job = Job.objects.get()
    Job.objects.filter(id=job.id).update(
        status=JobStatus.DONE, result=5, worker_id="w1", started_at=timezone.now(), finished_at=timezone.now()
    )
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert result.worker_ids == ["w1"] and result.attempts == 1
    assert dtasks.add.get_result(result.id).return_value == 5


@pytest.mark.parametrize("options", [{}, {"dedupe_key": "k"}, {"dedupe_key": "k", "on_duplicate": "replace"}])
def test_enqueue_answers_the_result_get_result_reads_in_one_statement(options):
    with CaptureQueriesContext(connections["default"]) as queries:
        result = dtasks.add.using(**options).enqueue(2, 3)
    assert len(queries) == 1  # enqueued_at comes back from the insert itself
    assert result.enqueued_at == Job.objects.get().created_at  # the database's clock, not Python's
    assert backend().get_result(result.id).enqueued_at == result.enqueued_at
    if not options:  # (a per-call jobq option is not part of the task get_result() answers)
        assert backend().get_result(result.id) == result
    before = dataclasses.asdict(result)
    result.refresh()
    assert dataclasses.asdict(result) == before


def test_async_methods():
    async def scenario():
        result = await dtasks.async_add.aenqueue(1, 2)
        fetched = await backend().aget_result(result.id)
        also = await dtasks.async_add.aget_result(result.id)
        await result.arefresh()
        await sync_to_async(connections.close_all)()
        return result, fetched, also

    result, fetched, also = asyncio.run(scenario())
    assert fetched.id == also.id == result.id and fetched.status == TaskResultStatus.READY


def test_failed_result_lists_each_attempts_error_with_its_class():
    result = dtasks.always_fails.enqueue("x")
    errors = [
        {
            "attempt": 1,
            "worker": "w1",
            "error": "Traceback ...\nValueError: boom",
            "class": "builtins.ValueError",
        },
        {"attempt": 2, "worker": "w2", "error": "lease expired: worker stopped renewing it"},
    ]
    Job.objects.filter(id=int(result.id)).update(status=JobStatus.DEAD, errors=errors, worker_id="w2")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [
        "builtins.ValueError", "django_jobq.exceptions.WorkerLost",
    ]  # fmt: skip
    assert result.errors[0].exception_class is ValueError
    assert result.worker_ids == ["w1", "w2"]
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_unknown_pruned_and_foreign_ids_do_not_exist():
    b = backend()
    for bad in ("999999", "not-a-number", "-1", str(1 << 70)):
        with pytest.raises(TaskResultDoesNotExist):
            b.get_result(bad)
    native = Job.objects.enqueue("test.noop")
    with pytest.raises(TaskResultDoesNotExist, match="not a Django task"):
        b.get_result(str(native))
    result = dtasks.add.enqueue(1, 1)
    Job.objects.all().delete()  # pruned
    with pytest.raises(TaskResultDoesNotExist):
        b.get_result(result.id)


def test_enqueued_signal_is_sent_by_the_producer():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((sender, task_result.id))

    task_enqueued.connect(receiver)
    try:
        result = dtasks.add.enqueue(1, 1)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(JobqBackend, result.id)]


def test_dedupe_key_answers_the_holders_result():
    first = dtasks.add.using(dedupe_key="k1").enqueue(1, 1)
    second = dtasks.add.using(dedupe_key="k1").enqueue(5, 5)
    assert second.id == first.id and second.args == [1, 1]
    assert Job.objects.count() == 1


def test_replace_with_a_running_holder_answers_the_holders_result():
    first = dtasks.add.using(dedupe_key="k2", on_duplicate="replace").enqueue(1, 1)
    Job.objects.filter(id=int(first.id)).update(status=JobStatus.RUNNING, worker_id="w1")
    second = dtasks.add.using(dedupe_key="k2", on_duplicate="replace").enqueue(2, 2)
    assert second.id == first.id and second.status == TaskResultStatus.RUNNING and second.args == [1, 1]


def test_a_key_held_by_another_django_tasks_job_is_a_conflict_in_every_mode():
    holder = dtasks.add.using(dedupe_key="k3").enqueue(1, 1)
    for mode in ("skip", "replace"):
        with pytest.raises(DedupeKeyConflict, match=f"job {holder.id} of task 'tests.testapp.dtasks.add'"):
            dtasks.always_fails.using(dedupe_key="k3", on_duplicate=mode).enqueue("x")
    job = Job.objects.get()  # the holder, untouched
    assert str(job.id) == holder.id and job.payload == {"args": [1, 1], "kwargs": {}}


def test_a_key_held_by_a_native_job_is_a_conflict_not_a_missing_result():
    native = Job.objects.enqueue("test.noop", dedupe_key="k4")
    with pytest.raises(DedupeKeyConflict, match=f"job {native} of task 'test.noop'") as conflict:
        dtasks.add.using(dedupe_key="k4").enqueue(1, 1)
    assert isinstance(conflict.value, JobqError) and conflict.value.holder_id == native
    assert conflict.value.holder_task == "test.noop" and Job.objects.count() == 1


def test_enqueue_validates_the_task_against_the_current_tasks_setting(settings):
    """A task made under one TASKS is refused, as Django's backends refuse it, by one that does not
    list its queue; enqueue and aenqueue alike, writing nothing."""
    emails = dtasks.add.using(queue_name="emails")
    settings.TASKS = {"default": {"BACKEND": "django_jobq.backend.JobqBackend", "QUEUES": ["default"]}}
    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid"):
        emails.enqueue(1, 1)

    async def scenario():
        try:
            await emails.aenqueue(1, 1)
        finally:
            await sync_to_async(connections.close_all)()

    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid"):
        asyncio.run(scenario())
    assert not Job.objects.exists()
    dtasks.add.enqueue(1, 1)  # a queue the setting lists still enqueues
    assert Job.objects.get().queue == "default"


def test_tags_per_call_reach_the_row_and_bad_ones_are_refused():
    result = dtasks.add.using(tags=("tenant:42", "export")).enqueue(1, 1)
    assert Job.objects.get(id=int(result.id)).tags == ["tenant:42", "export"]
    with pytest.raises(InvalidTask, match="a tag"):
        dtasks.add.using(tags=("bad\x00",)).enqueue(1, 1)
    assert Job.objects.count() == 1


def test_using_refuses_options_that_belong_to_the_decorator():
    with pytest.raises(TypeError, match="timeout") as caught:
        dtasks.add.using(timeout=5)
    assert isinstance(caught.value, JobqError)


@pytest.mark.parametrize("option", ["max_attempt", "timeout\x00", "__class__", "func"])
def test_the_decorator_refuses_an_option_it_does_not_take_naming_those_it_does(option):
    from django_jobq.backend import task

    with pytest.raises(UnknownTaskOption, match="unexpected options") as caught:
        task(lambda: None, **{option: 1})
    assert isinstance(caught.value, JobqError) and isinstance(caught.value, TypeError)
    assert "max_attempts" in str(caught.value)


# -- validate_task refusals -------------------------------------------------------------------------
def test_refuses_a_function_not_at_module_level():
    def inner():
        return None

    with pytest.raises(InvalidTask, match="module level"):
        task(inner)


def test_refuses_a_bad_priority():
    for priority in (101, -101):
        with pytest.raises(InvalidTask, match="priority"):
            dtasks.add.using(priority=priority)


def test_refuses_a_naive_run_after():
    with pytest.raises(InvalidTask, match="aware"):
        dtasks.add.using(run_after=dt.datetime(2030, 1, 1))


def test_refuses_an_unknown_queue():
    with pytest.raises(InvalidTask, match="nope"):
        dtasks.add.using(queue_name="nope")


def test_refuses_takes_context_without_a_context_argument():
    with pytest.raises(InvalidTask, match="context"):
        task(takes_context=True)(dtasks.add.func)


def test_refuses_bad_jobq_options():
    from django_jobq.backend import task as jobq_task

    with pytest.raises(InvalidTask, match="max_attempts"):
        jobq_task(max_attempts=0)(_spare)
    with pytest.raises(InvalidTask, match="rate"):
        jobq_task(rate_limit="often")(_spare)
    with pytest.raises(InvalidTask, match="on_duplicate"):
        dtasks.add.using(on_duplicate="replace")  # needs a dedupe_key
    assert find_task("tests.integration.test_backend._spare") is None


def _spare():
    return None


@pytest.mark.p1
def test_backend_cancel_answers_as_the_manager_and_a_cancelled_result_reads_failed():
    from django_jobq import CancelOutcome

    result = dtasks.add.enqueue(1, 2)
    assert backend().cancel(result.id) is CancelOutcome.CANCELLED
    assert backend().cancel(result.id) is CancelOutcome.ALREADY_FINISHED
    fetched = backend().get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED and fetched.finished_at is not None
    assert Job.objects.get(id=int(result.id)).cancelled_by == "backend default"
    assert backend().cancel(str(10**12)) is CancelOutcome.NOT_FOUND
    for bad in ("nope", "-1", str(1 << 63)):
        with pytest.raises(TaskResultDoesNotExist):
            backend().cancel(bad)
