"""Single-flight: enqueue_or_get, wait_for and run_once with a real worker, threads and processes."""

import datetime as dt
import json
import subprocess
import threading

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connections, transaction

from django_jobq import DedupeKeyConflict, InvalidJob, JobFailed, WaitTimeout
from django_jobq.models import Job, JobStatus
from tests.conftest import run_module
from tests.testapp.models import Execution
from tests.testapp.tasks import expensive

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def callers(n_threads: int, n_processes: int, key: str, **kwargs) -> list:
    """run_once from threads and processes at once; their answers (a result, or the exception)."""
    procs = [
        run_module(
            "tests.procs.enqueuer",
            "run_once",
            "test.expensive",
            key,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in range(n_processes)
    ]
    barrier = threading.Barrier(n_threads)
    answers: list = []
    lock = threading.Lock()

    def call():
        try:
            barrier.wait()
            try:
                answer = expensive.using(dedupe_key=key).run_once(timeout=60, key=key, **kwargs)
            except Exception as exc:
                answer = exc
            with lock:
                answers.append(answer)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=call) for _ in range(n_threads)]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for proc in procs:
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0
        answers.append(json.loads(out))
    return answers


@pytest.mark.p0
def test_sixteen_concurrent_callers_share_one_run_and_one_result(worker_thread):
    worker_thread({"default": 4})
    answers = callers(12, 4, "report:7")
    assert answers == [{"key": "report:7", "value": 42}] * 16
    assert Execution.objects.count() == 1  # the expensive work ran exactly once
    assert Job.objects.filter(dedupe_key="report:7").count() == 1


def test_a_done_job_inside_its_window_answers_without_a_run(worker_thread):
    worker_thread({"default": 1})
    first = expensive.using(dedupe_key="k").run_once(timeout=30, key="k", pause=0)
    second = expensive.using(dedupe_key="k").run_once(timeout=30, key="k", pause=0)
    assert first == second == {"key": "k", "value": 42}
    assert Execution.objects.count() == 1
    job_id, created = Job.objects.enqueue_or_get("test.expensive", {"key": "k"}, dedupe_key="k")
    assert not created and Job.objects.get(id=job_id).status == JobStatus.DONE


def test_a_dead_job_answers_with_its_error_until_its_window_ends(worker_thread, python_clock):
    worker_thread({"default": 1})
    with time_machine.travel(dt.datetime(2026, 6, 1, tzinfo=dt.UTC), tick=True) as clock:
        run = expensive.using(dedupe_key="k", dedupe_dead=60)
        with pytest.raises(JobFailed, match="expensive work for k failed") as failed:
            run.run_once(timeout=30, key="k", pause=0, fail=True)
        assert failed.value.job.status == JobStatus.DEAD and "ValueError" in failed.value.error
        with pytest.raises(JobFailed):  # inside the DEAD window: the same answer, no new run
            run.run_once(timeout=30, key="k", pause=0)
        assert Execution.objects.count() == 1
        clock.shift(60)
        assert run.run_once(timeout=30, key="k", pause=0) == {"key": "k", "value": 42}
        assert Execution.objects.count() == 2


def test_enqueue_or_get_threads_race_to_one_created(worker_thread):
    barrier = threading.Barrier(8)
    answers = []

    def call():
        barrier.wait()
        answers.append(Job.objects.enqueue_or_get("test.noop", dedupe_key="k"))
        connections.close_all()

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({job_id for job_id, _ in answers}) == 1
    assert sum(created for _, created in answers) == 1


def test_a_key_held_by_another_tasks_job_is_a_conflict_never_its_answer():
    holder = Job.objects.enqueue("test.noop", dedupe_key="shared")
    job = Job.objects.claim("w1")
    Job.objects.complete(holder, "w1", {"noop": True}, fence=job.fence)  # DONE, inside its window
    with pytest.raises(DedupeKeyConflict, match=f"job {holder} of task 'test.noop'"):
        Job.objects.enqueue_or_get("test.echo", {"a": 1}, dedupe_key="shared")
    with pytest.raises(DedupeKeyConflict, match=f"job {holder} of task 'test.noop'"):
        expensive.using(dedupe_key="shared").run_once(timeout=1, key="shared")
    assert list(Job.objects.values_list("id", flat=True)) == [holder]
    assert Job.objects.enqueue_or_get("test.noop", dedupe_key="shared") == (holder, False)  # its own task


def test_wait_for_times_out_with_wait_timeout():
    job_id = Job.objects.enqueue("test.noop")
    with pytest.raises(WaitTimeout, match=f"job {job_id} did not finish within 0.2s"):
        Job.objects.wait_for(job_id, timeout=0.2)
    assert Job.objects.get(id=job_id).awaited  # a finishing statement will notify


def test_wait_for_wakes_on_the_completion_notify_not_the_poll(worker_thread):
    """With polling every 10 minutes, only the NOTIFY can end the wait before its 30 s timeout."""
    job_id = Job.objects.enqueue("test.sleep", {"seconds": 0.3})
    worker_thread({"default": 1})
    job = Job.objects.wait_for(job_id, timeout=30, poll=600)
    assert job.status == JobStatus.DONE and job.result == 0.3


def test_wait_for_a_dead_job_returns_it_with_its_error(worker_thread):
    job_id = Job.objects.enqueue("test.permanent")
    worker_thread({"default": 1})
    job = Job.objects.wait_for(job_id, timeout=30, poll=600)
    assert job.status == JobStatus.DEAD and "cannot ever work" in job.last_error


def test_wait_for_an_already_finished_job_returns_at_once():
    job_id = Job.objects.enqueue("test.noop")
    job = Job.objects.claim("w1")
    Job.objects.complete(job_id, "w1", {"ok": True}, fence=job.fence)
    assert Job.objects.wait_for(job_id, timeout=0).result == {"ok": True}


def test_wait_for_bad_arguments():
    with pytest.raises(InvalidJob, match="there is no job 999999"):
        Job.objects.wait_for(999_999, timeout=1)
    for bad in (0, -1, "1", None, True):
        with pytest.raises(InvalidJob):
            Job.objects.wait_for(bad, timeout=1)
    with pytest.raises(InvalidJob):
        Job.objects.wait_for(1, timeout=-1)


def test_run_once_refuses_without_a_key_or_inside_a_transaction():
    with pytest.raises(InvalidJob, match="needs a dedupe key"):
        expensive.run_once(timeout=1, key="k")
    with transaction.atomic(), pytest.raises(InvalidJob, match="inside a transaction"):
        expensive.using(dedupe_key="k").run_once(timeout=1, key="k")
    assert not Job.objects.exists()
    with pytest.raises(InvalidJob, match="needs a dedupe_key"):
        Job.objects.enqueue_or_get("test.noop", dedupe_key=None)


def test_async_twins(worker_thread):
    import asyncio

    worker_thread({"default": 1})

    async def main():
        job_id, created = await Job.objects.aenqueue_or_get("test.echo", {"a": 1}, dedupe_key="async")
        job = await Job.objects.await_for(job_id, timeout=30)
        result = await expensive.using(dedupe_key="ak").arun_once(timeout=30, key="ak", pause=0)
        await sync_to_async(connections.close_all)()  # the sync thread's connection, opened above
        return created, job.result, result

    assert asyncio.run(main()) == (True, {"a": 1}, {"key": "ak", "value": 42})
