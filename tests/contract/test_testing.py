"""django_jobq.testing: jobs run inside a test's transaction through the worker's claim → run → fenced
write, eager mode for both APIs, assertions on what was enqueued, and the pytest fixtures."""

import datetime as dt

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_jobq.backend.compat import TaskResultStatus
from django_jobq.models import Job
from django_jobq.status import JobStatus
from django_jobq.testing import (
    JobsFailed,
    assert_enqueued,
    assert_not_enqueued,
    drain,
    eager,
    enqueued,
    run_jobs,
)
from tests.testapp import testing_tasks as t
from tests.testapp.models import Execution

pytestmark = [pytest.mark.contract, pytest.mark.django_db]


def marks() -> list[str]:
    return list(Execution.objects.order_by("id").values_list("worker_id", flat=True))


def test_run_jobs_runs_due_jobs_to_done_inside_the_tests_transaction():
    first = t.add.enqueue(a=2, b=3)
    second = t.async_add.enqueue(a=4, b=5)
    done = run_jobs()
    assert [r.job_id for r in done] == [first, second]
    assert done.results() == [5, 9]
    rows = {job.id: job for job in Job.objects.filter(id__in=[first, second])}
    assert {job.status for job in rows.values()} == {JobStatus.DONE}
    assert rows[first].result == 5 and rows[first].attempts == 1 and rows[first].worker_id == "jobq-testing"
    assert run_jobs().runs == []  # nothing due any more


def test_jobs_enqueued_by_jobs_run_until_none_is_due_or_one_at_a_time():
    t.then.enqueue(label="a", next_label="b")
    one = run_jobs(until_empty=False)
    assert len(one) == 1 and marks() == ["a"]
    rest = run_jobs()
    assert [r.result for r in rest] == ["b"] and marks() == ["a", "b"]


def test_a_queue_is_run_alone_when_named():
    t.mark.using(queue="emails").enqueue(label="email")
    t.mark.enqueue(label="default")
    assert [r.queue for r in run_jobs("emails")] == ["emails"]
    assert marks() == ["email"]
    assert [r.queue for r in run_jobs(queues=["default", "other"])] == ["default"]
    with pytest.raises(TypeError, match="queue or queues"):
        run_jobs("emails", queues=["default"])


def test_a_failed_run_is_retried_after_its_backoff_and_drain_names_it():
    job_id = t.fails.enqueue(reason="card declined")
    done = run_jobs()
    assert [r.status for r in done] == [JobStatus.PENDING]
    assert done.failed and "ValueError: card declined" in done.failed[0].error
    job = Job.objects.get(id=job_id)
    assert job.status == JobStatus.PENDING and job.attempts == 1 and "card declined" in job.last_error
    t.fails.enqueue(reason="second")
    with pytest.raises(JobsFailed, match=r"(?s)1 of 1 run\(s\) failed.*ValueError: second") as caught:
        drain()
    assert caught.value.run.failed[0].task == "testing.fails"


def test_a_task_raising_system_exit_fails_its_run_instead_of_ending_the_test():
    job_id = t.exits.enqueue(kind="SystemExit")
    done = run_jobs()
    assert [r.status for r in done] == [JobStatus.PENDING]
    assert done.failed[0].error.endswith("SystemExit: SystemExit in a task\n")
    assert Job.objects.get(id=job_id).errors[0]["class"] == "builtins.SystemExit"  # on both engines


def test_retries_off_sends_a_failed_run_dead_at_once():
    job_id = t.fails.enqueue()
    assert [r.status for r in run_jobs(retries=False)] == [JobStatus.DEAD]
    assert Job.objects.get(id=job_id).status == JobStatus.DEAD


def test_a_retry_runs_once_the_queues_clock_reaches_it(python_clock):
    with time_machine.travel(dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC), tick=False) as clock:
        job_id = t.fails.enqueue()
        run_jobs()
        assert run_jobs().runs == []  # the retry is not due yet
        clock.shift(dt.timedelta(seconds=601))
        assert [r.attempt for r in run_jobs()] == [2]
        assert Job.objects.get(id=job_id).attempts == 2


def test_a_scheduled_job_waits_for_its_time(python_clock):
    with time_machine.travel(dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC), tick=False) as clock:
        t.mark.using(delay=60).enqueue(label="later")
        assert run_jobs().runs == [] and marks() == []
        clock.shift(dt.timedelta(seconds=61))
        run_jobs()
        assert marks() == ["later"]


def test_discard_and_snooze_are_outcomes_not_failures():
    discarded = t.discards.enqueue()
    snoozed = t.snoozes.enqueue()
    done = drain()  # raises nothing
    assert [r.status for r in done] == [JobStatus.CANCELLED, JobStatus.PENDING]
    assert done.cancelled[0].error == "the order is gone" and not done.failed
    assert Job.objects.get(id=discarded).status == JobStatus.CANCELLED
    job = Job.objects.get(id=snoozed)
    assert job.status == JobStatus.PENDING and job.snoozes == 1 and job.attempts == 0


def test_an_atomic_task_writes_done_in_its_own_transaction():
    job_id = t.atomic_mark.enqueue(label="once")
    assert [r.status for r in run_jobs()] == [JobStatus.DONE]
    assert marks() == ["once"] and Job.objects.get(id=job_id).result == "once"


def test_a_job_that_keeps_enqueuing_itself_stops_at_max_runs():
    t.forever.enqueue()
    with pytest.raises(JobsFailed, match="still due after 5 runs") as caught:
        run_jobs(max_runs=5)
    assert len(caught.value.run) == 5
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 1  # the one it peeked at, unspent
    assert Job.objects.get(status=JobStatus.PENDING).attempts == 0


def test_the_runners_own_queries_stay_out_of_the_query_count():
    t.add.enqueue(a=1, b=1)
    t.mark.enqueue(label="counted")
    with CaptureQueriesContext(connection) as queries:
        run_jobs()
    assert len(queries) == 1 and "testapp_execution" in queries[0]["sql"]  # mark's INSERT, alone


def test_eager_runs_a_native_enqueue_before_it_returns():
    with eager():
        job_id = t.then.enqueue(label="a", next_label="b")
        assert marks() == ["a", "b"]  # and the job it enqueued
        assert Job.objects.get(id=job_id).status == JobStatus.DONE
        later = t.mark.using(delay=3600).enqueue(label="later")
        assert Job.objects.get(id=later).status == JobStatus.PENDING  # scheduled jobs wait
    t.mark.enqueue(label="outside")
    assert marks() == ["a", "b"]


def test_eager_counts_the_enqueue_and_the_tasks_queries_only():
    with CaptureQueriesContext(connection) as plain:
        t.add.enqueue(a=1, b=2)
    run_jobs()
    with eager(), CaptureQueriesContext(connection) as with_add:
        t.add.enqueue(a=1, b=2)
    with eager(), CaptureQueriesContext(connection) as with_mark:
        t.mark.enqueue(label="one query")
    assert len(with_add) == len(plain)
    assert len(with_mark) == len(plain) + 1


def test_eager_failures_are_final_by_default_and_retried_when_asked():
    with eager():
        dead = t.fails.enqueue()
    with eager(retries=True):
        retried = t.fails.enqueue()
    assert Job.objects.get(id=dead).status == JobStatus.DEAD
    job = Job.objects.get(id=retried)
    assert job.status == JobStatus.PENDING and job.attempts == 1


@eager()
def test_eager_as_a_decorator_and_for_bulk_enqueues():
    from django_jobq.managers import NewJob

    ids = Job.objects.enqueue_many([NewJob("testing.mark", {"label": x}) for x in "xyz"])
    assert marks() == ["x", "y", "z"]
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {JobStatus.DONE}


def test_eager_django_tasks_results_read_as_immediate_backends():
    with eager():
        ok = t.django_add.enqueue(2, 40)
        failed = t.django_fails.enqueue("x")
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 42
    assert failed.status == TaskResultStatus.FAILED
    assert "boom x" in failed.errors[-1].traceback


def test_drained_django_tasks_read_successful():
    result = t.django_add.enqueue(1, 2)
    assert result.status == TaskResultStatus.READY
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3


def test_assert_enqueued_matches_the_task_and_a_subset_of_its_arguments():
    job_id = t.mark.using(tags=["tenant:7"]).enqueue(label="welcome")
    t.django_add.enqueue(1, b=2)
    assert assert_enqueued(t.mark, label="welcome").id == job_id
    assert assert_enqueued("testing.mark").id == job_id
    assert assert_enqueued(t.django_add, 1, b=2).task == t.django_add.module_path
    assert_enqueued(t.django_add, 1)
    assert_enqueued(t.django_add.module_path, b=2)
    assert_not_enqueued(t.mark, label="goodbye")
    assert_not_enqueued(t.django_add, 2)
    with pytest.raises(AssertionError, match=r"(?s)no job testing.mark\(label='bye'\).*'label': 'welcome'"):
        assert_enqueued(t.mark, label="bye")
    with pytest.raises(AssertionError, match=r"1 job\(s\) testing.mark\(label='welcome'\) were enqueued"):
        assert_not_enqueued(t.mark, label="welcome")
    with pytest.raises(TypeError, match="keyword arguments only"):
        assert_enqueued(t.mark, "welcome")
    assert [j.id for j in enqueued(t.mark, tags=["tenant:7"])] == [job_id]
    assert enqueued(t.mark, tags=["tenant:8"]) == []
    assert enqueued(status=JobStatus.PENDING, queue="default")[0].id == job_id
    drain()
    assert assert_enqueued(t.mark, label="welcome").status == JobStatus.DONE  # drained jobs still count


def test_the_fixtures(jobq, jobq_eager):
    t.mark.enqueue(label="eager")  # jobq_eager: ran already
    assert marks() == ["eager"]
    jobq.assert_enqueued(t.mark, label="eager")
    with pytest.raises(AssertionError):
        jobq.assert_not_enqueued(t.mark)
    assert jobq.drain().runs == [] and jobq.run().runs == []
    assert jobq.enqueued(t.mark)[0].status == JobStatus.DONE
