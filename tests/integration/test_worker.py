"""The worker run in-process: tasks, results, retries, timeouts, lanes, wake-ups, signals."""

import io
import logging
import threading
import time

import psycopg
import pytest
from django.core.management import call_command
from django.db import transaction

import django_jobq
from django_jobq import backoff, signals
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.notify.listener import connection_params
from django_jobq.worker import Worker, parse_lanes
from tests.conftest import wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def run_burst(lanes=None, **options) -> Worker:
    worker = Worker(lanes or {"default": 4}, burst=True, **options)
    worker.run()
    return worker


@pytest.mark.p0
def test_burst_drains_sync_and_async_tasks_and_stores_results():
    ids = [Job.objects.enqueue("test.echo", {"n": i}) for i in range(20)]
    add = Job.objects.enqueue("test.async_add", {"a": 2, "b": 3})
    worker = run_burst()
    assert worker.processed == 21
    assert Job.objects.counts() == {
        "PENDING": 0,
        "RUNNING": 0,
        "DONE": 21,
        "DEAD": 0,
        "CANCELLED": 0,
        "WAITING": 0,
    }
    assert [Job.objects.get(id=i).result for i in ids] == [{"n": i} for i in range(20)]
    assert Job.objects.get(id=add).result == 5
    record = WorkerRecord.objects.get(worker_id=worker.worker_id)
    assert record.stopped_at is not None and record.lanes == {"default": 4}


@pytest.mark.p0
def test_max_jobs_stops_after_that_many():
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(10))
    worker = Worker({"default": 3}, max_jobs=4)
    worker.run()
    assert worker.processed == 4
    assert Job.objects.counts()["DONE"] == 4 and Job.objects.counts()["PENDING"] == 6


@pytest.mark.p0
def test_transient_error_retried_in_slot_keeps_the_job(settings):
    jid = Job.objects.enqueue("test.flaky", {"failures": 2})
    retried = []
    handler = lambda **kw: retried.append(kw["delay"])  # noqa: E731
    signals.job_retried.connect(handler)
    try:
        worker = run_burst()
    finally:
        signals.job_retried.disconnect(handler)
    job = Job.objects.get(id=jid)
    assert job.status == JobStatus.DONE and job.result == {"attempt": 3}
    assert job.attempts == 3 and len(job.errors) == 2
    assert {e["worker"] for e in job.errors} == {worker.worker_id}  # never left the slot
    assert len(retried) == 2 and all(d <= 0.1 for d in retried)


@pytest.mark.p0
@pytest.mark.parametrize("other_arrives", ["before the failure", "during the wait"])
def test_a_short_retry_gives_up_its_slot_when_other_work_is_due(worker_thread, settings, other_arrives):
    """A retry due in 20 s may wait in its slot (SHORT_RETRY_SECONDS 30) only while the lane has
    nothing else due: with the lane's one slot taken, a due job already queued, or one that arrives
    during the wait, sends the retry back to the queue (attempt spent, due when its wait would have
    ended) and runs in the freed slot now, not after the 20 s."""
    settings.JOBQ = {**settings.JOBQ, "SHORT_RETRY_SECONDS": 30, "POLL_INTERVAL": 0.2}
    retried = Job.objects.enqueue("test.fails_once", priority=1)
    if other_arrives == "before the failure":
        other = Job.objects.enqueue("test.record", priority=2)
    worker_thread({"default": 1})
    wait_until(lambda: Execution.objects.filter(job_id=retried).exists(), message="the first attempt")
    if other_arrives == "during the wait":
        other = Job.objects.enqueue("test.record", priority=2)
    wait_until(
        lambda: Job.objects.filter(id=other, status=JobStatus.DONE).exists(),
        timeout=15,
        message="the other job ran before the 20 s retry",
    )
    job = Job.objects.get(id=retried)
    assert (job.status, job.attempts, job.error_count, job.worker_id) == (JobStatus.PENDING, 1, 1, None)
    assert job.run_at > job.started_at  # due when the 20 s wait would have ended
    assert list(Execution.objects.filter(job_id=retried).values_list("attempt", flat=True)) == [1]


@pytest.mark.p0
def test_long_backoff_reenqueues_and_frees_the_slot(monkeypatch):
    # Full jitter draws the delay from [0, 1000 s]: take the ceiling, so it is never a short retry
    monkeypatch.setattr(backoff.random, "uniform", lambda low, high: high)
    jid = Job.objects.enqueue("test.always_fails", max_attempts=3)
    Job.objects.enqueue("test.noop")
    run_burst({"default": 1})
    job = Job.objects.get(id=jid)
    assert job.status == JobStatus.PENDING and job.worker_id is None and job.attempts == 1
    assert job.run_at > job.started_at  # rescheduled in the future (up to the 1000 s ceiling)
    assert Job.objects.counts()["DONE"] == 1  # the slot was free for the next job


@pytest.mark.p0
def test_permanent_errors_go_dead_at_once(settings):
    settings.JOBQ = {**settings.JOBQ, "PERMANENT_EXCEPTIONS": ["builtins.LookupError"]}
    perm = Job.objects.enqueue("test.permanent", max_attempts=5)
    configured = Job.objects.enqueue("test.lookup_error", max_attempts=5)
    bad_result = Job.objects.enqueue("test.bad_result", max_attempts=5)
    run_burst()
    for jid, text in (
        (perm, "PermanentError"),
        (configured, "LookupError"),
        (bad_result, "result['when'] must be JSON"),
    ):
        job = Job.objects.get(id=jid)
        assert job.status == JobStatus.DEAD and job.attempts == 1, jid
        assert text in job.last_error and "Traceback" in job.last_error


@pytest.mark.p0
def test_attempt_ceiling_holds():
    jid = Job.objects.enqueue("test.flaky", {"failures": 10}, max_attempts=3)
    run_burst()
    job = Job.objects.get(id=jid)
    assert job.status == JobStatus.DEAD and job.attempts == 3 and len(job.errors) == 3


def test_async_timeout_fails_the_job():
    jid = Job.objects.enqueue("test.async_hang")
    run_burst()
    job = Job.objects.get(id=jid)
    assert job.status == JobStatus.DEAD and "JobTimeout" in job.last_error


@pytest.mark.slow
def test_a_sync_job_past_its_timeout_stays_running_until_its_function_returns_then_fails(settings):
    """A plain function cannot be interrupted: past its timeout (0.5 s) its job stays RUNNING, leased,
    so it never runs twice at once; when the function returns (after 2 s) the job fails with
    JobTimeout (DEAD: one attempt) and the late return value is discarded."""
    jid = Job.objects.enqueue("test.sync_hang", {"seconds": 2})
    worker = Worker({"default": 1}, burst=True, grace=10)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(lambda: worker.lanes["default"].stuck() == 1, timeout=10, message="the watchdog's timeout")
    assert Job.objects.get(id=jid).status == JobStatus.RUNNING  # its function still runs
    thread.join(30)
    job = Job.objects.get(id=jid)
    assert job.status == JobStatus.DEAD and "JobTimeout" in job.last_error
    assert job.result is None  # the late return value was discarded


def test_progress_is_recorded():
    jid = Job.objects.enqueue("test.progress", {"steps": 5})
    run_burst()
    assert Job.objects.get(id=jid).progress == {"done": 5, "total": 5}


@pytest.mark.p0
def test_lane_isolation(worker_thread):
    Job.objects.enqueue_many(NewJob("test.sleep", {"seconds": 2}, queue="agents") for _ in range(4))
    worker_thread({"agents": 1, "interactive": 2})
    wait_until(lambda: Job.objects.filter(queue="agents", status=JobStatus.RUNNING).exists())
    quick = Job.objects.enqueue("test.noop", queue="interactive")
    wait_until(
        lambda: Job.objects.get(id=quick).status == JobStatus.DONE, timeout=1.5, message="interactive job"
    )
    # The agents lane is still saturated: one running, the rest waiting.
    assert Job.objects.filter(queue="agents", status=JobStatus.DONE).count() == 0
    assert Job.objects.filter(queue="agents", status=JobStatus.PENDING).count() == 3


@pytest.mark.p0
def test_rolled_back_enqueue_notifies_nobody_and_runs_nothing(worker_thread):
    worker = worker_thread({"default": 1}, poll_interval=0.2)
    # Idle, the worker holds the idle lock (so enqueues notify), and has said so once ("")
    wait_until(lambda: worker.idle_lock is not None and worker.idle_lock.held.is_set(), message="idle lock")
    with psycopg.connect(**connection_params("default"), autocommit=True) as listen:
        listen.execute("LISTEN jobq")
        with pytest.raises(RuntimeError), transaction.atomic():
            Job.objects.enqueue("test.record")
            raise RuntimeError("rollback")
        assert list(listen.notifies(timeout=0.5)) == []
        time.sleep(0.5)  # more than two poll intervals: the worker had time to run anything there was
        assert not Job.objects.exists() and worker.processed == 0
        Job.objects.enqueue("test.noop")  # a committed enqueue does notify
        assert [n.payload for n in listen.notifies(timeout=2, stop_after=1)] == ["default"]


@pytest.mark.p0
def test_notify_wakes_an_idle_worker_long_before_the_poll(worker_thread):
    poll = 5.0
    worker = worker_thread({"default": 1}, poll_interval=poll)
    wait_until(lambda: worker.listener and worker.listener.connected.is_set(), message="LISTEN connected")
    time.sleep(0.2)  # let the worker go idle on its poll wait
    latencies = []
    for _ in range(5):
        jid = Job.objects.enqueue("test.noop")
        wait_until(lambda jid=jid: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=poll * 2)
        job = Job.objects.get(id=jid)
        latencies.append((job.started_at - job.created_at).total_seconds())
    assert max(latencies) < poll / 10, latencies


def test_parse_lanes():
    assert parse_lanes("interactive:8,agents:2", 4) == {"interactive": 8, "agents": 2}
    assert parse_lanes("default", 4) == {"default": 4}
    for bad in ("", "a:0", "a:x", "a,a"):
        with pytest.raises(Exception, match=r"queue|lane|--queues"):
            parse_lanes(bad, 4)


def test_worker_refuses_a_lease_shorter_than_the_heartbeat(settings):
    from django_jobq.exceptions import ConfigurationError

    settings.JOBQ = {"LEASE_SECONDS": 5, "HEARTBEAT_SECONDS": 5}
    with pytest.raises(ConfigurationError, match="LEASE_SECONDS"):
        Worker({"default": 1})


@pytest.mark.p0
def test_jitter_spreads_two_series_of_retries_apart():
    first = Job.objects.enqueue("test.always_fails", max_attempts=5)
    second = Job.objects.enqueue("test.always_fails", max_attempts=5)
    delays: dict[int, float] = {}
    handler = lambda job, delay, **kw: delays.__setitem__(job.id, delay)  # noqa: E731
    signals.job_retried.connect(handler)
    try:
        run_burst()
    finally:
        signals.job_retried.disconnect(handler)
    a, b = Job.objects.get(id=first), Job.objects.get(id=second)
    assert a.status == b.status == JobStatus.PENDING  # a 1000 s ceiling: re-enqueued, not retried in the slot
    assert 0 <= delays[first] <= 1000 and 0 <= delays[second] <= 1000
    assert delays[first] != delays[second] and a.run_at != b.run_at  # the same failure, spread apart


def test_embedded_reaper_returns_expired_leases_and_the_worker_runs_them(worker_thread):
    from django_jobq.reaper import Reaper

    jid = Job.objects.enqueue("test.echo", {"x": 1})
    assert Job.objects.claim("crashed-elsewhere", lease_seconds=0.2).id == jid
    worker_thread({"default": 1}, reaper=Reaper(interval=0.1), poll_interval=0.1)
    wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=10, message="reaped and run")
    job = Job.objects.get(id=jid)
    assert job.attempts == 2 and "lease expired" in job.errors[0]["error"]


def test_commands_refuse_bad_options_and_reap_once():
    from io import StringIO

    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="SLOTS"):
        call_command("jobq_worker", "--queues", "default:x")
    with pytest.raises(CommandError, match="max_jobs"):
        call_command("jobq_worker", "--max-jobs", "0")
    Job.objects.enqueue("test.noop")
    Job.objects.claim("gone", lease_seconds=0.01)
    time.sleep(0.05)
    out = StringIO()
    call_command("jobq_reap", "--once", stdout=out)
    assert out.getvalue().startswith("reaped 1,")
    assert Job.objects.counts()["PENDING"] == 1


@pytest.mark.p0
def test_a_killed_listen_connection_is_replaced(worker_thread):
    from django.db import connection

    poll = 5.0
    worker = worker_thread({"default": 1}, poll_interval=poll)
    wait_until(lambda: worker.listener and worker.listener.connected.is_set(), message="LISTEN connected")

    def listener_pids():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobq-listener' AND datname = current_database()"
            )
            return [row[0] for row in cursor.fetchall()]

    (old,) = listener_pids()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old])
    wait_until(
        lambda: listener_pids() and listener_pids() != [old], timeout=10, message="a new LISTEN connection"
    )
    wait_until(worker.listener.connected.is_set, message="listening again")
    time.sleep(0.2)  # idle again on the 5 s poll
    jid = Job.objects.enqueue("test.noop")
    wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=poll * 2)
    job = Job.objects.get(id=jid)
    assert (job.started_at - job.created_at).total_seconds() < poll / 5  # woken, not polled


@django_jobq.task(name="test.twice_an_hour", rate_limit="2/h")
def twice_an_hour():
    return None


def test_processed_counts_runs_that_ended_not_starts_a_rate_limit_refused(worker_thread):
    """Five jobs of a task allowed twice an hour, claimed at once by five slots: two run, three wait
    for a permit (refused as they start); the worker has processed two jobs."""
    refused = []

    def on_refusal(sender=None, job=None, **kwargs):
        refused.append(job.id)

    signals.job_rate_limited.connect(on_refusal, weak=False)
    try:
        ids = Job.objects.enqueue_many(NewJob("test.twice_an_hour") for _ in range(5))
        worker = worker_thread({"default": 5})
        wait_until(
            lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 2, message="2 done"
        )
        wait_until(lambda: len(set(refused)) == 3, message="3 refused")
    finally:
        signals.job_rate_limited.disconnect(on_refusal)
    worker.stop()
    wait_until(worker.finished.is_set, message="the worker stopped")
    assert worker.processed == 2
    assert Job.objects.filter(id__in=ids, status=JobStatus.PENDING, attempts=0).count() == 3


def test_the_worker_command_says_it_stopped_once(caplog):
    Job.objects.enqueue("test.noop")
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="django_jobq"):
        call_command("jobq_worker", "--burst", "--worker-id", "once", stdout=out)
    stopped = [r.getMessage() for r in caplog.records if "stopped after" in r.getMessage()]
    assert stopped == ["worker once stopped after 1 job(s)"]
    assert "stopped after" not in out.getvalue()  # logged, not printed again
    out = io.StringIO()
    call_command("jobq_worker", "--burst", "--worker-id", "quiet", stdout=out)  # its log quieter than INFO
    assert "worker quiet stopped after 0 job(s)" in out.getvalue()
