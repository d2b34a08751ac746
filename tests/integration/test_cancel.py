"""Cancelling, snoozing and discarding jobs run by real workers on a real PostgreSQL: a cancel reaches
a running task within a heartbeat (``context.cancelled``; asyncio cancellation for ``async def``),
its run ends CANCELLED whatever it returns, never retried; Snooze and Discard end a run without
spending an attempt or a dead letter; a worker cut off from the database never overrides a cancel."""

import datetime as dt
import random
import threading
from collections import Counter

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_jobq import CancelOutcome
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import start_worker, wait_until
from tests.servers.proxy import PausableProxy
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FAST = {"LEASE_SECONDS": 2, "HEARTBEAT_SECONDS": 0.2, "POLL_INTERVAL": 0.2}
FAST_ENV = {"JOBQ_LEASE_SECONDS": "2", "JOBQ_HEARTBEAT_SECONDS": "0.5", "JOBQ_POLL_INTERVAL": "0.2"}


@pytest.fixture
def fast(settings):
    settings.JOBQ = {**settings.JOBQ, **FAST}


def started(job_id: int) -> bool:
    return Execution.objects.filter(job_id=job_id).exists()


def finished(job_id: int) -> bool:
    return Job.objects.filter(
        id=job_id, status__in=[JobStatus.DONE, JobStatus.DEAD, JobStatus.CANCELLED]
    ).exists()


def cancel_while_running(task: str, **payload) -> Job:
    job_id = Job.objects.enqueue(task, payload)
    wait_until(lambda: started(job_id), message="the task started")
    assert Job.objects.cancel(job_id, by="test") is CancelOutcome.CANCEL_REQUESTED
    wait_until(lambda: finished(job_id), message="the run ended")
    return Job.objects.get(id=job_id)


@pytest.mark.p0
def test_a_sync_task_that_checks_context_cancelled_stops_and_ends_cancelled(fast, worker_thread):
    worker_thread()
    job = cancel_while_running("test.until_cancelled", seconds=60)
    assert (job.status, job.attempts, job.result, job.cancelled_by) == (JobStatus.CANCELLED, 1, None, "test")
    assert job.last_error == f"job {job.id} was cancelled; the run stopped"  # a reason, not our traceback
    assert Execution.objects.filter(job_id=job.id).count() == 1  # never retried


@pytest.mark.p0
def test_an_async_task_is_cancelled_on_its_event_loop(fast, worker_thread):
    worker_thread()
    job = cancel_while_running("test.async_until_cancelled", seconds=60)
    assert (job.status, job.attempts, job.result) == (JobStatus.CANCELLED, 1, None)
    assert job.last_error == f"job {job.id} was cancelled; the run stopped"
    assert Execution.objects.filter(job_id=job.id).count() == 1


@pytest.mark.p0
def test_a_task_that_ignores_the_cancel_ends_cancelled_when_it_returns_its_result_discarded(
    fast, worker_thread
):
    worker_thread()
    job = cancel_while_running("test.ignores_cancel", seconds=60)
    assert (job.status, job.result) == (JobStatus.CANCELLED, None)
    assert "result was discarded" in job.last_error


@pytest.mark.p0
def test_the_slot_serves_the_next_job_after_a_cancel(fast, worker_thread):
    worker_thread({"default": 1})
    cancel_while_running("test.until_cancelled", seconds=60)
    after = Job.objects.enqueue("test.echo", {"n": 1})
    wait_until(lambda: Job.objects.filter(id=after, status=JobStatus.DONE).exists(), message="next job")


@pytest.mark.p0
def test_a_pending_job_cancelled_behind_a_busy_slot_never_runs(fast, worker_thread):
    worker_thread({"default": 1})
    busy = Job.objects.enqueue("test.until_cancelled", {"seconds": 60})
    wait_until(lambda: started(busy), message="the slot is busy")
    waiting = Job.objects.enqueue("test.record")
    assert Job.objects.cancel(waiting) in (CancelOutcome.CANCELLED, CancelOutcome.CANCEL_REQUESTED)
    Job.objects.cancel(busy)
    wait_until(lambda: finished(busy) and finished(waiting), message="both ended")
    assert Job.objects.get(id=waiting).status == JobStatus.CANCELLED
    assert not started(waiting)  # claimed ahead or not, it never started


@pytest.mark.p0
def test_snooze_puts_the_job_back_without_spending_an_attempt(fast, worker_thread):
    worker_thread()
    job_id = Job.objects.enqueue("test.snoozer", {"times": 3}, max_attempts=1)
    wait_until(lambda: finished(job_id), message="the job ended")
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempts, job.snoozes) == (JobStatus.DONE, 1, 3)
    assert job.result == {"snoozes": 3, "attempt": 1}
    assert Execution.objects.filter(job_id=job_id).count() == 4


def test_past_max_snoozes_a_snooze_is_an_ordinary_failure(fast, settings, worker_thread):
    settings.JOBQ = {**settings.JOBQ, "MAX_SNOOZES": 2}
    worker_thread()
    job_id = Job.objects.enqueue("test.snoozer", {"times": 10}, max_attempts=1)
    wait_until(lambda: finished(job_id), message="the job ended")
    job = Job.objects.get(id=job_id)
    assert (job.status, job.snoozes) == (JobStatus.DEAD, 2)
    assert "MAX_SNOOZES" in job.last_error


def test_a_snoozed_job_of_a_capped_task_gives_its_place_to_the_next(fast, worker_thread):
    """A cap of one: the first job snoozes for an hour, and the second runs meanwhile (a snoozed job
    is PENDING, so it holds none of the task's running places)."""
    worker_thread()
    sleeper = Job.objects.enqueue("test.capped_snoozer", {"seconds": 3600})
    wait_until(lambda: Job.objects.get(id=sleeper).snoozes == 1, message="the first job snoozed")
    runner = Job.objects.enqueue("test.capped_snoozer", {"seconds": 0})
    wait_until(lambda: finished(runner), message="the second job ran")
    second = Job.objects.get(id=runner)
    first = Job.objects.get(id=sleeper)
    assert second.status == JobStatus.DONE
    assert (first.status, first.attempts, first.snoozes) == (JobStatus.PENDING, 0, 1)
    assert first.run_at > timezone.now() + dt.timedelta(minutes=59)


@pytest.mark.parametrize(
    "seconds", [-1, 10**12, "soon", "nan", "inf"]
)  # the task makes floats of the last two
def test_a_bad_snooze_fails_that_job_only(fast, worker_thread, seconds):
    worker_thread()
    bad = Job.objects.enqueue("test.bad_snooze", {"seconds": seconds}, max_attempts=1)
    good = Job.objects.enqueue("test.echo", {"n": 1})
    wait_until(lambda: finished(bad) and finished(good), message="both ended")
    job = Job.objects.get(id=bad)
    assert job.status == JobStatus.DEAD and "InvalidJob" in job.last_error and job.snoozes == 0
    assert Job.objects.get(id=good).status == JobStatus.DONE


@pytest.mark.p0
def test_discard_ends_the_job_cancelled_with_its_reason_and_no_retry(fast, worker_thread):
    worker_thread()
    job_id = Job.objects.enqueue("test.discarder", {"reason": "order 42 was deleted"})
    wait_until(lambda: finished(job_id), message="the job ended")
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempts, job.last_error) == (JobStatus.CANCELLED, 1, "order 42 was deleted")


@pytest.mark.p0
def test_discard_on_ends_a_job_whose_object_is_gone_cancelled(fast, worker_thread):
    worker_thread()
    job_id = Job.objects.enqueue("test.object_gone", {"pk": 10**9})
    wait_until(lambda: finished(job_id), message="the job ended")
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempts) == (JobStatus.CANCELLED, 1)
    assert "DoesNotExist" in job.last_error


def test_jobq_discard_on_applies_to_every_task(fast, settings, worker_thread):
    settings.JOBQ = {**settings.JOBQ, "DISCARD_ON": ["django.core.exceptions.ObjectDoesNotExist"]}
    worker_thread()
    job_id = Job.objects.enqueue("test.ledger_gone", {"pk": 10**9}, max_attempts=5)
    wait_until(lambda: finished(job_id), message="the job ended")
    assert Job.objects.get(id=job_id).status == JobStatus.CANCELLED


@pytest.mark.slow
@pytest.mark.p0
def test_a_thousand_cancels_race_a_draining_queue_and_each_job_ends_once():
    """Two jobq_worker processes drain 1,000 short jobs while four threads cancel every one of them,
    in random order. Each job ends in exactly one terminal state, as its cancel's answer says: a job
    cancelled while PENDING never ran, one asked while RUNNING ended CANCELLED (after its one run, or
    without ever starting when it was claimed ahead), one already finished stayed DONE."""
    ids = Job.objects.enqueue_many(NewJob("test.record", {"pause": 0.002}) for _ in range(1000))
    workers = [
        start_worker("--concurrency", "4", "--worker-id", f"drain-{n}", env=FAST_ENV) for n in range(2)
    ]
    outcomes: dict[int, CancelOutcome] = {}
    order = ids[:]
    random.Random(7).shuffle(order)

    def cancel(part: list[int]) -> None:
        try:
            for job_id in part:
                outcomes[job_id] = Job.objects.cancel(job_id, by="race")
        finally:
            connections.close_all()

    try:
        wait_until(lambda: Execution.objects.exists(), message="the workers started")
        threads = [threading.Thread(target=cancel, args=(order[n::4],)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        wait_until(lambda: not Job.objects.filter(status__in=[0, 1]).exists(), timeout=120,
                   message="every job ended")  # fmt: skip
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)
    status = dict(Job.objects.filter(id__in=ids).values_list("id", "status"))
    runs = Counter(Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True))
    seen = Counter(outcomes.values())
    print({"outcomes": {o.name: n for o, n in seen.items()}})
    assert len(outcomes) == 1000
    for job_id, outcome in outcomes.items():
        if outcome is CancelOutcome.CANCELLED:
            assert status[job_id] == JobStatus.CANCELLED and runs[job_id] == 0, job_id
        elif (
            outcome is CancelOutcome.CANCEL_REQUESTED
        ):  # RUNNING: started, or claimed ahead and never started
            assert status[job_id] == JobStatus.CANCELLED and runs[job_id] <= 1, job_id
        else:
            assert outcome is CancelOutcome.ALREADY_FINISHED
            assert status[job_id] == JobStatus.DONE and runs[job_id] == 1, job_id
    assert max(runs.values()) == 1


@pytest.mark.serial  # kills a worker or cuts its link: never beside other database tests
@pytest.mark.slow
@pytest.mark.p0
def test_a_worker_cut_off_from_the_database_never_overrides_a_cancel(tmp_path):
    """A worker reaches PostgreSQL through a proxy that stops forwarding while its job runs (lease
    2 s, heartbeat 0.5 s). A cancel asked meanwhile cannot reach it; the reaper ends the job CANCELLED
    when the lease runs out (never PENDING: it is not run again), and once the link is back the
    worker's own late outcome is refused."""
    db = connection.settings_dict
    target = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    before = sessions()
    with PausableProxy(target) as proxy:
        url = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
        worker = start_worker(
            "--concurrency", "1", "--worker-id", "cut", env={**FAST_ENV, "DATABASE_URL": url}
        )
        try:
            mark = tmp_path / "end"
            job_id = Job.objects.enqueue("test.ignores_cancel", {"seconds": 3, "path": str(mark)})
            wait_until(lambda: started(job_id), message="the run started")
            proxy.pause()
            assert Job.objects.cancel(job_id, by="ops") is CancelOutcome.CANCEL_REQUESTED
            wait_until(lambda: Job.objects.reap() is None or finished(job_id), timeout=30,
                       message="the reaper ended it")  # fmt: skip
            job = Job.objects.get(id=job_id)
            assert job.status == JobStatus.CANCELLED and "lease expired" in job.last_error
            # the cut-off run returns (it never learnt of the cancel); its outcome waits behind the link
            wait_until(mark.exists, timeout=30, message="the cut-off run returned")
        finally:
            proxy.resume()
            worker.terminate()
            worker.wait(30)
    job = Job.objects.get(id=job_id)
    assert (job.status, job.result, job.attempts) == (JobStatus.CANCELLED, None, 1)
    assert Execution.objects.filter(job_id=job_id).count() == 1
    wait_until(lambda: sessions() <= before, message="the cut-off worker's sessions ended")


def sessions() -> int:
    """Sessions on the test database other than this one (the server ends a proxied session a moment
    after its client went away, and the test database is dropped at the end)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]
