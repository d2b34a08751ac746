"""Pausing and resuming a queue: the manager's statements, and workers that stop claiming from a paused
queue (within a poll interval, at once on the NOTIFY) while running jobs finish and enqueue goes on."""

import asyncio
import subprocess
import threading
import time

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError, connection, connections, transaction

import django_jobq
from django_jobq import InvalidJob
from django_jobq.managers import JobManager, NewJob
from django_jobq.models import Job, JobStatus, QueueState, WorkerRecord
from django_jobq.notify.listener import STATE_CHANGED, connection_params
from django_jobq.worker import ALL_QUEUES, Worker
from tests.conftest import ROOT, start_worker, wait_until
from tests.integration.test_readme import readme_blocks

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db(transaction=True)]

GATE = threading.Event()  # test.pause_gate runs until the test sets it


@django_jobq.task(name="test.pause_gate")
def pause_gate():
    if not GATE.wait(30):
        raise TimeoutError("the test never opened the gate")
    return "finished"


def statuses(ids):
    return sorted(Job.objects.filter(id__in=ids).order_by().values_list("status", flat=True).distinct())


def test_pause_and_resume_say_whether_they_changed_anything():
    assert Job.objects.paused_queues() == []
    assert Job.objects.pause_queue("emails", by="alice") is True
    assert Job.objects.pause_queue("emails", by="bob") is False  # already paused: kept as alice left it
    assert Job.objects.pause_queue("billing") is True
    assert Job.objects.paused_queues() == ["billing", "emails"]
    state = QueueState.objects.get(name="emails")
    assert (state.paused, state.changed_by) == (True, "alice")
    assert QueueState.objects.get(name="billing").changed_by == "api"
    assert Job.objects.resume_queue("emails", by="carol") is True
    assert Job.objects.resume_queue("emails") is False
    assert Job.objects.paused_queues() == ["billing"]
    state = QueueState.objects.get(name="emails")
    assert (state.paused, state.changed_by) == (False, "carol") and state.changed_at is not None
    assert Job.objects.pause_queue("emails") is True  # pausing again after a resume
    assert Job.objects.resume_queue("never-paused") is False
    assert not QueueState.objects.filter(name="never-paused").exists()  # a resume creates no row


def test_the_async_twins_pause_and_resume():
    async def scenario():
        results = (
            await Job.objects.apause_queue("emails"),
            await Job.objects.apaused_queues(),
            await Job.objects.aresume_queue("emails"),
        )
        await sync_to_async(connections.close_all)()  # the executor thread's connection
        return results

    assert asyncio.run(scenario()) == (True, ["emails"], True)


def test_concurrent_pauses_exactly_one_hears_true():
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def pause():
        barrier.wait()
        try:
            results.append(Job.objects.pause_queue("emails"))
        finally:
            connection.close()

    threads = [threading.Thread(target=pause) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]


def test_the_state_is_durable_across_a_reconnect():
    Job.objects.pause_queue("emails")
    connection.close()
    assert Job.objects.paused_queues() == ["emails"]  # a new connection reads it back
    with psycopg.connect(**connection_params("default")) as other:
        assert other.execute("SELECT name, paused FROM jobq_queue").fetchall() == [("emails", True)]


def test_pause_and_resume_notify_on_commit_only():
    with psycopg.connect(**connection_params("default"), autocommit=True) as listen:
        listen.execute("LISTEN jobq")
        with pytest.raises(RuntimeError), transaction.atomic():
            Job.objects.pause_queue("emails")
            raise RuntimeError("rollback")
        assert Job.objects.paused_queues() == []
        with transaction.atomic():
            Job.objects.pause_queue("emails")
            assert list(listen.notifies(timeout=0.2)) == []  # not before the commit
        assert [n.payload for n in listen.notifies(timeout=5, stop_after=1)] == [STATE_CHANGED]
        Job.objects.resume_queue("emails")
        assert [n.payload for n in listen.notifies(timeout=5, stop_after=1)] == [STATE_CHANGED]
        assert Job.objects.resume_queue("emails") is False  # nothing changed: nobody is notified
        assert list(listen.notifies(timeout=0.2)) == []


@pytest.mark.parametrize(
    "bad", ["*", "", " emails", "emails ", "a\x00b", "\ud800", "x" * 201, 42, None, ["emails"]]
)
def test_bad_queue_names_are_refused_before_anything_is_written(bad):
    for call in (Job.objects.pause_queue, Job.objects.resume_queue):
        with pytest.raises(InvalidJob):
            call(bad)
    assert not QueueState.objects.exists()


@pytest.mark.parametrize("bad", ["", "a\x00b", "\ud800", "x" * 201, 7])
def test_a_bad_by_is_refused(bad):
    with pytest.raises(InvalidJob):
        Job.objects.pause_queue("emails", by=bad)
    assert not QueueState.objects.exists()


def test_enqueue_works_on_a_paused_queue():
    Job.objects.pause_queue("emails")
    one = Job.objects.enqueue("test.noop", queue="emails")
    many = Job.objects.enqueue_many(NewJob("test.noop", queue="emails") for _ in range(3))
    assert statuses([one, *many]) == [JobStatus.PENDING]


@pytest.mark.parametrize(
    "lanes, lane_of_a", [({"a": 2, "b": 2}, "a"), ({ALL_QUEUES: 2}, ALL_QUEUES)], ids=["named", "star"]
)
def test_a_paused_queue_stays_pending_while_another_drains(worker_thread, lanes, lane_of_a):
    worker = worker_thread(lanes)
    warm = Job.objects.enqueue("test.noop", queue="a")  # the lane claims from "a" before the pause
    wait_until(lambda: Job.objects.get(id=warm).status == JobStatus.DONE, message="warm-up job")
    Job.objects.pause_queue("a")
    wait_until(lambda: "a" in worker.lanes[lane_of_a].held, timeout=10, message="lane sees the pause")
    paused = Job.objects.enqueue_many(NewJob("test.noop", queue="a") for _ in range(5))
    other = Job.objects.enqueue_many(NewJob("test.noop", queue="b") for _ in range(10))
    wait_until(lambda: statuses(other) == [JobStatus.DONE], message="queue b drained")
    assert statuses(paused) == [JobStatus.PENDING]
    Job.objects.resume_queue("a")
    wait_until(lambda: statuses(paused) == [JobStatus.DONE], timeout=10, message="queue a drained")


def test_resume_wakes_the_workers_at_once(worker_thread):
    # A poll ten minutes long: only the resume's NOTIFY can make the worker claim within the timeout.
    worker = worker_thread({"a": 1}, poll_interval=600)
    wait_until(lambda: worker.listener and worker.listener.connected.is_set(), message="LISTEN connected")
    Job.objects.pause_queue("a")
    wait_until(lambda: worker.lanes["a"].paused, timeout=10, message="the pause's NOTIFY")
    jid = Job.objects.enqueue("test.noop", queue="a")  # its NOTIFY wakes the lane, which stays paused
    assert Job.objects.get(id=jid).status == JobStatus.PENDING
    Job.objects.resume_queue("a")
    wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=10, message="resumed")
    assert not worker.lanes["a"].paused


def test_a_paused_lane_waits_instead_of_spinning(worker_thread, monkeypatch):
    calls = {"claim": 0, "read": 0}
    claim, read = JobManager.complete_and_claim, JobManager.paused_queues

    def counted_claim(self, *args, **kwargs):
        calls["claim"] += 1
        return claim(self, *args, **kwargs)

    def counted_read(self):
        calls["read"] += 1
        return read(self)

    monkeypatch.setattr(JobManager, "complete_and_claim", counted_claim)
    monkeypatch.setattr(JobManager, "paused_queues", counted_read)
    Job.objects.pause_queue("a")
    worker = worker_thread({"a": 1}, poll_interval=600)
    wait_until(lambda: worker.listener and worker.listener.connected.is_set(), message="LISTEN connected")
    wait_until(lambda: worker.lanes["a"].paused, message="lane paused")
    Job.objects.enqueue("test.noop", queue="a")  # a wake-up: the lane looks, and waits again
    time.sleep(0.3)  # a spinning lane would run thousands of cycles here
    before = dict(calls)
    time.sleep(0.3)
    assert calls == before
    assert calls["claim"] == 0  # nothing to write and nothing to claim: not even one statement
    assert calls["read"] <= 3  # the start, the LISTEN connect, and at most the first wake-up


def test_running_jobs_finish_while_their_queue_is_paused(worker_thread):
    GATE.clear()
    worker = worker_thread({"a": 1, "b": 1})
    running = Job.objects.enqueue("test.pause_gate", queue="a")
    waiting = Job.objects.enqueue_many(NewJob("test.noop", queue="a") for _ in range(3))
    wait_until(lambda: Job.objects.get(id=running).status == JobStatus.RUNNING, message="gate running")
    Job.objects.pause_queue("a")
    wait_until(lambda: "a" in worker.paused, timeout=10, message="worker sees the pause")
    GATE.set()
    wait_until(lambda: Job.objects.get(id=running).status == JobStatus.DONE, message="running job written")
    assert Job.objects.get(id=running).result == "finished"
    assert worker.lanes["a"].paused
    assert statuses(waiting) == [JobStatus.PENDING]  # its lane wrote the outcome and claimed nothing


def test_a_failing_read_of_the_paused_queues_does_not_kill_the_lane(worker_thread, monkeypatch, caplog):
    worker = worker_thread({"a": 1, "b": 1})
    warm = Job.objects.enqueue("test.noop", queue="b")
    wait_until(lambda: Job.objects.get(id=warm).status == JobStatus.DONE, message="worker up")
    failed = threading.Event()
    read = JobManager.paused_queues

    def flaky_read(self):
        if not failed.is_set():
            failed.set()
            raise OperationalError("the database went away")
        return read(self)

    monkeypatch.setattr(JobManager, "paused_queues", flaky_read)
    Job.objects.pause_queue("a")  # its NOTIFY makes a lane read, and the read fails once
    wait_until(failed.is_set, timeout=10, message="the failing read")
    wait_until(lambda: worker.lanes["a"].paused, timeout=10, message="the read tried again")
    paused = Job.objects.enqueue_many(NewJob("test.noop", queue="a") for _ in range(3))
    other = Job.objects.enqueue_many(NewJob("test.noop", queue="b") for _ in range(3))
    wait_until(lambda: statuses(other) == [JobStatus.DONE], message="lane b still serving")
    assert statuses(paused) == [JobStatus.PENDING]
    assert not worker.stopping.is_set() and not any(lane.done.is_set() for lane in worker.lanes.values())
    assert "could not read the paused queues" in caplog.text


def test_two_worker_processes_both_stop_claiming():
    ids = Job.objects.enqueue_many(NewJob("test.sleep", {"seconds": 0.05}, queue="a") for _ in range(800))
    workers = [
        start_worker("--queues", "a:2,b:2", "--grace", "5", stderr=subprocess.DEVNULL) for _ in range(2)
    ]
    try:
        wait_until(lambda: WorkerRecord.objects.count() == 2, message="two workers")

        def claimers():
            done = Job.objects.filter(id__in=ids, status=JobStatus.DONE)
            return done.values_list("worker_id", flat=True).distinct().count() == 2

        wait_until(claimers, message="both workers claiming from a")
        Job.objects.pause_queue("a")
        # A worker that still claimed would always hold a RUNNING job of "a": its write of a finished job
        # and its next claim are one statement.
        running = Job.objects.filter(queue="a", status=JobStatus.RUNNING)
        wait_until(lambda: not running.exists(), timeout=30, message="both workers stop claiming")
        left = Job.objects.filter(queue="a", status=JobStatus.PENDING).count()
        assert left > 0
        other = Job.objects.enqueue_many(NewJob("test.noop", queue="b") for _ in range(20))
        wait_until(lambda: statuses(other) == [JobStatus.DONE], message="queue b drained")
        assert Job.objects.filter(queue="a", status=JobStatus.PENDING).count() == left
        assert not running.exists()
        Job.objects.resume_queue("a")
        wait_until(
            lambda: Job.objects.filter(queue="a", status=JobStatus.PENDING).count() < left, message="resumed"
        )
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            assert worker.wait(timeout=30) == 0


def test_a_burst_worker_whose_queues_are_all_paused_exits():
    Job.objects.pause_queue("a")
    jid = Job.objects.enqueue("test.noop", queue="a")
    worker = Worker({"a": 1}, burst=True)
    worker.run()  # returns: nothing it may claim is due
    assert worker.processed == 0 and Job.objects.get(id=jid).status == JobStatus.PENDING


def test_the_documented_example_runs_and_says_what_it_returns():
    (block,) = [b for b in readme_blocks(ROOT / "docs" / "flow-control-pause.md") if b.language == "python"]
    lines = block.code.splitlines()
    # Each call with a "# True" / "# False" / "# [...]" comment returns that.
    checked = [
        f"assert ({code.strip()}) == {comment.split(':')[0].strip()}" if "#" in line else line
        for line in lines
        for code, _, comment in [line.partition("#")]
    ]
    exec(compile("\n".join(checked), f"docs/flow-control-pause.md:{block.line}", "exec"), {})
    assert Job.objects.paused_queues() == []
