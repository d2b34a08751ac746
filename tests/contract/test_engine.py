"""The engine interface: the same statements on every engine, each capability either there or refused
with a clear error, wake-ups, and races on the fence and the reaper's lease (threads, on either engine)."""

import datetime as dt
import time

import pytest
import time_machine

from django_jobq import ConfigurationError
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.sql import ENGINES, Unsupported, engine_for
from tests.conftest import wait_until
from tests.contract.racing import race

pytestmark = [pytest.mark.contract, pytest.mark.p0]


def test_every_engine_has_every_statement_under_the_same_name():
    postgres, sqlite = ENGINES["postgresql"], ENGINES["sqlite"]
    assert set(vars(postgres.statements)) == set(vars(sqlite.statements))
    assert set(vars(postgres.stats)) == set(vars(sqlite.stats))
    assert len(vars(postgres.statements)) > 50


def test_a_statement_an_engine_lacks_names_its_capability_and_is_refused():
    for engine in ENGINES.values():
        for name, statement in vars(engine.statements).items():
            if isinstance(statement, Unsupported):
                assert not getattr(engine.capabilities, statement.feature), name
    engine = engine_for("default")
    for statement in vars(engine.statements).values():
        if isinstance(statement, Unsupported):
            with pytest.raises(ConfigurationError, match=statement.feature):
                engine.run(None, statement, {})  # refused before any connection is used


@pytest.mark.django_db
def test_max_depth_works_or_is_refused_before_anything_is_written(settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"bounded": {"MAX_DEPTH": 1}}}
    if engine_for("default").capabilities.max_depth:
        assert Job.objects.enqueue("test.echo", {}, queue="bounded")
    else:
        with pytest.raises(ConfigurationError, match="max_depth"):
            Job.objects.enqueue("test.echo", {}, queue="bounded")
        assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_capped_task_is_enqueued_or_refused_before_anything_is_written():
    if engine_for("default").capabilities.task_caps:
        assert Job.objects.enqueue("test.capped", {})
    else:
        with pytest.raises(ConfigurationError, match="task_caps"):
            Job.objects.enqueue("test.capped", {})
        assert not Job.objects.exists()


@pytest.mark.django_db
def test_wait_for_is_refused_where_the_engine_cannot_wait():
    job_id = Job.objects.enqueue("test.echo", {})
    if engine_for("default").capabilities.wait_for:
        pytest.skip("this engine waits (covered by test_single_flight)")
    with pytest.raises(ConfigurationError, match="wait_for"):
        Job.objects.wait_for(job_id, timeout=1)


@pytest.mark.django_db(transaction=True)
def test_an_idle_worker_is_woken_by_an_enqueue_in_its_process(worker_thread):
    # Polling once an hour: only the wake-up (NOTIFY, or this process's on-commit wake-up) runs the job.
    worker = worker_thread({"default": 1}, poll_interval=3600)
    wait_until(lambda: WorkerRecord.objects.filter(worker_id=worker.worker_id).exists(), message="started")
    time.sleep(0.5)  # its lane has found nothing to claim and waits on the hour-long poll
    job_id = Job.objects.enqueue("test.noop")
    wait_until(lambda: Job.objects.get(id=job_id).status == JobStatus.DONE, timeout=60, message="woken")


@pytest.mark.django_db(transaction=True)
def test_only_the_current_run_completes_a_job_after_reap_and_reclaim(python_clock):
    with time_machine.travel(dt.datetime(2026, 3, 1, tzinfo=dt.UTC), tick=False) as clock:
        job_id = Job.objects.enqueue("test.echo", {})
        stale = Job.objects.claim("w1", lease_seconds=1)
        clock.shift(2)
        assert Job.objects.reap() == [job_id]
        current = Job.objects.claim("w2")
        assert current.fence == stale.fence + 1
        runs = [("w1", stale.fence), ("w2", current.fence)] * 4
        results = race(8, lambda i: Job.objects.complete(job_id, runs[i][0], {"by": i}, fence=runs[i][1]))
    winners = [i for i, ok in enumerate(results) if ok]
    assert len(winners) == 1 and runs[winners[0]][0] == "w2"
    job = Job.objects.get(id=job_id)
    assert job.status == JobStatus.DONE and job.result == {"by": winners[0]}


@pytest.mark.django_db(transaction=True)
def test_eight_reapers_racing_for_the_lease_make_one_holder():
    results = race(8, lambda i: Job.objects.acquire_lease("reaper", f"reaper-{i}", 30))
    assert results.count(True) == 1
    holder = f"reaper-{results.index(True)}"
    assert Job.objects.acquire_lease("reaper", holder, 30) is True  # the holder renews
    assert Job.objects.acquire_lease("reaper", "someone-else", 30) is False


def test_the_scheduler_starts_or_is_refused_on_an_engine_without_it():
    from django_jobq.scheduler import Scheduler

    if engine_for("default").capabilities.scheduler:
        assert Scheduler(interval=1).interval == 1
    else:
        with pytest.raises(ConfigurationError, match="scheduler"):
            Scheduler(interval=1)
