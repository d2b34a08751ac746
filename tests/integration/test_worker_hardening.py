"""The worker under the conditions that used to wedge or mislead it: a task holding its own row, in-slot
retries and timeouts, long lease renewals, odd channel names, a duplicate id, late claim replies,
statement bounds, and a lane whose every slot is stuck."""

import threading
import time

import psycopg
import pytest
from django.db import connection, connections

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.notify.listener import connection_params
from django_jobq.worker import EXIT_STUCK, Worker
from tests.conftest import wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def short_lease(settings):
    settings.JOBQ = {**settings.JOBQ, "LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 1, "POLL_INTERVAL": 0.2}


@pytest.mark.p0
@pytest.mark.slow
def test_a_task_holding_a_transaction_never_blocks_its_heartbeat(short_lease, worker_thread):
    jid = Job.objects.enqueue("test.locks_own_row", {"hold": 5})  # longer than the 3 s lease
    worker_thread({"default": 1})
    wait_until(lambda: Job.objects.get(id=jid).progress, message="progress written")
    assert not Execution.objects.exists()  # the task's transaction is still open ...
    first = Job.objects.get(id=jid).lease_until
    wait_until(lambda: Job.objects.get(id=jid).lease_until > first, timeout=5, message="lease renewed")
    assert Job.objects.reap() == []  # ... and its lease is alive
    wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=15, message="done")
    job = Job.objects.get(id=jid)
    assert (job.attempts, job.progress, job.result) == (1, {"done": 1, "total": 2}, "held")


@pytest.mark.p0
def test_reap_and_heartbeat_skip_rows_another_transaction_holds():
    jid = Job.objects.enqueue("test.noop")
    job = Job.objects.claim("w1", lease_seconds=0.1)
    time.sleep(0.2)
    with psycopg.connect(**connection_params("default")) as holder:
        holder.execute("SELECT 1 FROM jobq_job WHERE id = %s FOR UPDATE", [jid])  # held, uncommitted
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = '5s'")  # a statement that waited would fail here
        assert Job.objects.heartbeat("w1", [(jid, job.fence)], 30) == set()  # skipped, not lost
        assert Job.objects.reap() == []  # skipped, left for the next pass
        holder.rollback()
    assert Job.objects.reap() == [jid]
    with connection.cursor() as cursor:
        cursor.execute("RESET statement_timeout")


@pytest.mark.p0
def test_heartbeats_and_reaps_in_opposite_orders_never_deadlock():
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(300))
    held = [(j.id, j.fence) for j in Job.objects.claim_batch("w1", 300, lease_seconds=0.05)]
    errors: list[BaseException] = []

    def beat():
        try:
            for _ in range(40):
                Job.objects.heartbeat("w1", sorted(held, reverse=True), 0.05)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=beat)
    thread.start()
    for _ in range(40):
        Job.objects.reap()
    thread.join()
    assert errors == []


@pytest.mark.p0
@pytest.mark.slow
def test_each_in_slot_retry_gets_its_own_timeout():
    jid = Job.objects.enqueue("test.slow_flaky", {"seconds": 1.0})  # timeout 1.5 s per attempt
    Worker({"default": 1}, burst=True).run()
    job = Job.objects.get(id=jid)
    assert (job.status, job.result, job.attempts) == (JobStatus.DONE, {"attempt": 2}, 2)


@pytest.mark.p0
@pytest.mark.slow
def test_a_longer_lease_asked_by_the_task_survives_heartbeats(short_lease, worker_thread):
    jid = Job.objects.enqueue("test.renews_long", {"seconds": 3.5})
    worker_thread({"default": 1})

    def far_lease():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT lease_until > now() + interval '50 minutes' FROM jobq_job WHERE id = %s", [jid]
            )
            return cursor.fetchone()[0]

    wait_until(far_lease, message="the task's hour-long lease")
    time.sleep(2.5)  # two heartbeats (every second, 3 s leases) run meanwhile
    assert far_lease()  # neither shortened it
    wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=15, message="done")


@pytest.mark.p0
def test_the_lease_asked_by_the_task_is_kept_by_the_heartbeat():
    jid = Job.objects.enqueue("test.noop")
    job = Job.objects.claim("w1", lease_seconds=30)
    assert Job.objects.renew_lease(jid, "w1", 3600, fence=job.fence)
    long = Job.objects.get(id=jid).lease_until
    Job.objects.heartbeat("w1", [(jid, job.fence)], 30)
    assert Job.objects.get(id=jid).lease_until == long


@pytest.mark.p0
@pytest.mark.parametrize("channel", ["JobQ", "select", "jobq events"])
def test_any_notify_channel_wakes_the_worker(settings, worker_thread, channel):
    settings.JOBQ = {**settings.JOBQ, "NOTIFY_CHANNEL": channel}
    worker = worker_thread({"default": 1}, poll_interval=600)  # only a notification can wake it
    wait_until(lambda: worker.listener and worker.listener.connected.is_set(), message="listening")
    wait_until(lambda: WorkerRecord.objects.filter(worker_id=worker.worker_id).exists())
    time.sleep(0.3)  # the dispatcher has gone idle after its first empty claim
    jid = Job.objects.enqueue("test.noop")
    wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=10, message="woken")


@pytest.mark.p1
@pytest.mark.slow
def test_a_second_live_worker_with_the_same_id_is_refused(short_lease, worker_thread):
    from django_jobq import ConfigurationError

    first = worker_thread({"default": 1}, worker_id="twin")
    wait_until(lambda: WorkerRecord.objects.filter(worker_id=first.worker_id).exists())
    with pytest.raises(ConfigurationError, match="another live worker"):
        Worker({"default": 1}, worker_id="twin").run()


@pytest.mark.p1
def test_a_claim_reply_arriving_after_shutdown_is_given_back(short_lease):
    worker = Worker({"default": 2})
    jid = Job.objects.enqueue("test.noop")
    late = Job.objects.claim_batch(worker.worker_id, 1)
    worker.abandon.set()  # the shutdown's release has already run
    worker._hand_out(worker.lanes["default"], late, time.monotonic())
    job = Job.objects.get(id=jid)
    assert (job.status, job.worker_id, job.attempts) == (JobStatus.PENDING, None, 0)
    assert not worker._running
    worker._side_writer.close()


@pytest.mark.p1
def test_the_workers_statements_are_bounded_and_the_tasks_are_not(settings):
    settings.JOBQ = {**settings.JOBQ, "STATEMENT_TIMEOUT": 7, "LOCK_TIMEOUT": 2}
    seen = {}

    def bounded():
        Job.objects.bound_statements()
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')")
            seen["worker"] = list(cursor.fetchone())
        connections.close_all()

    thread = threading.Thread(target=bounded)
    thread.start()
    thread.join()
    jid = Job.objects.enqueue("test.show_timeouts")
    Worker({"default": 1}, burst=True).run()
    assert seen["worker"] == ["7s", "2s"]
    assert Job.objects.get(id=jid).result == ["0", "0"]  # a task's connection keeps its own settings


@pytest.mark.p1
@pytest.mark.slow
def test_a_lane_whose_every_slot_is_stuck_stops_the_worker_with_a_distinct_status(short_lease):
    Job.objects.enqueue("test.sync_hang", {"seconds": 8})  # timeout 0.5 s, then stuck in time.sleep
    worker = Worker({"default": 1})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(
        lambda: WorkerRecord.objects.filter(worker_id=worker.worker_id, stuck={"default": 1}).exists(),
        timeout=10, message="stuck lane reported",
    )  # fmt: skip
    thread.join(timeout=20)
    assert not thread.is_alive() and worker.exit_code == EXIT_STUCK
    assert Job.objects.get().status == JobStatus.DEAD  # the hung job failed with JobTimeout as it stopped
    assert "JobTimeout" in Job.objects.get().last_error


@pytest.mark.p1
def test_a_timeout_racing_an_in_slot_retry_never_strands_the_job(short_lease):
    """The watchdog times out a run just after its in-slot retry committed: the failure it writes names
    the old fence and is refused, and the new run is tracked (heartbeated, completable), not stranded."""
    from django_jobq.worker.classify import Outcome
    from django_jobq.worker.lanes import Running

    worker = Worker({"default": 1})
    lane = worker.lanes["default"]
    jid = Job.objects.enqueue("test.noop")
    job = Job.objects.claim_batch(worker.worker_id, 1)[0]
    old = Running(job, job.fence, job.attempts, lane, timeout=None)
    worker._running[old.key] = old
    lane.current[0] = old
    attempt, fence = Job.objects.retry_in_slot(jid, worker.worker_id, job.fence, "first attempt failed")
    old.timed_out = True  # the watchdog fires now, with the old run's fence
    del worker._running[old.key]
    worker._write_failure(old, Outcome(fence=old.fence, attempt=old.attempt, error="timeout"))()
    assert Job.objects.get(id=jid).status == JobStatus.RUNNING  # refused: the job is the new run's
    new = worker._next_run(old, 0, attempt, fence)
    assert worker._running == {(jid, fence): new} and lane.stuck() == 0
    assert Job.objects.heartbeat(worker.worker_id, list(worker._running), 30) == set()  # renewed, not lost
    assert Job.objects.complete(jid, worker.worker_id, "ok", fence=new.fence) is True
    worker._side_writer.close()


@pytest.mark.p1
def test_a_statement_rolled_back_to_break_a_deadlock_runs_again_on_the_same_connection(caplog):
    """A worker's statement that PostgreSQL picked to break a lock cycle wrote nothing: the worker
    runs it again at once on its connection, logging no database error."""
    from django.db import OperationalError

    worker = Worker({"default": 1}, worker_id="conflicted")
    calls: list[int] = []
    connection.ensure_connection()
    before = connection.connection

    def deadlocked_once() -> int:
        calls.append(1)
        if len(calls) == 1:
            try:
                raise psycopg.errors.DeadlockDetected("deadlock detected")
            except psycopg.Error as exc:
                raise OperationalError("deadlock detected") from exc
        return 7

    with caplog.at_level("INFO", logger="django_jobq"):
        assert worker._db(deadlocked_once) == 7
    assert len(calls) == 2 and connection.connection is before  # the same connection, not reopened
    assert "database error" not in caplog.text and "deadlock detected" not in caplog.text
    assert "rolled back to break a lock cycle" in caplog.text
