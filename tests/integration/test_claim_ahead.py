"""Claim-ahead: while a lane's runs are short it holds up to slots * (1 + CLAIM_AHEAD) jobs, never
more; a stopping worker gives the ones it never started back at once, without using an attempt; a
killed one's claimed-ahead jobs come back by lease expiry and run once."""

import signal
import threading
import time
from collections import Counter

import pytest
from django.db import connection

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.worker import Worker
from django_jobq.worker.lanes import Running
from tests.conftest import start_worker, wait_until
from tests.servers.proxy import PausableProxy
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FAST_LEASE = {"JOBQ_LEASE_SECONDS": "2", "JOBQ_HEARTBEAT_SECONDS": "0.5", "JOBQ_POLL_INTERVAL": "0.2"}


def _held_by_workers() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobq_job WHERE status = %s", [int(JobStatus.RUNNING)])
        return cursor.fetchone()[0]


def _most_held_while(worker) -> int:
    """Sample how many jobs are RUNNING (claimed, started or not) until the worker has stopped."""
    from django.db import connections

    most, stop = 0, threading.Event()

    def sample() -> None:
        nonlocal most
        try:
            while not stop.is_set():
                most = max(most, _held_by_workers())
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    wait_until(worker.finished.is_set, timeout=60, interval=0.01, message="worker drained")
    stop.set()
    sampler.join(10)
    return most


@pytest.mark.p0
@pytest.mark.parametrize(("claim_ahead", "bound"), [(0, 2), (1, 4), (3, 8)])
def test_a_lane_never_holds_more_than_slots_times_one_plus_claim_ahead(
    worker_thread, settings, claim_ahead, bound
):
    settings.JOBQ = {**settings.JOBQ, "CLAIM_AHEAD": claim_ahead}
    ids = Job.objects.enqueue_many(NewJob("test.noop") for _ in range(600))
    worker = worker_thread({"default": 2}, burst=True)
    most = _most_held_while(worker)
    assert most <= bound
    if claim_ahead:
        assert most > 2, "short runs: the lane claimed ahead of its slots"
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE, attempts=1).count() == 600


def test_claimed_ahead_jobs_keep_claim_order_on_a_one_slot_lane(worker_thread, settings):
    settings.JOBQ = {**settings.JOBQ, "CLAIM_AHEAD": 4}
    jobs = [NewJob("test.record", priority=p) for p in (50, 10, 40, 20, 30) * 20]
    ids = Job.objects.enqueue_many(jobs)
    priority = dict(zip(ids, (job.priority for job in jobs), strict=True))
    worker = worker_thread({"default": 1}, burst=True)
    wait_until(worker.finished.is_set, timeout=60, message="worker drained")
    ran = [priority[job_id] for job_id in Execution.objects.order_by("id").values_list("job_id", flat=True)]
    assert len(ran) == 100 and ran == sorted(ran)


def _warm_one_slot_worker(extra_env: dict[str, str], worker_id: str = "ahead"):
    """A one-slot worker that has run 20 short jobs, so it claims ahead (JOBQ_CLAIM_AHEAD 3)."""
    warm = Job.objects.enqueue_many(NewJob("test.noop", priority=1) for _ in range(20))
    env = {"JOBQ_CLAIM_AHEAD": "3", **extra_env}
    worker = start_worker("--queues", "default:1", "--worker-id", worker_id, env=env)
    try:
        wait_until(
            lambda: Job.objects.filter(id__in=warm, status=JobStatus.DONE).count() == 20, message="warm"
        )
    except BaseException:
        worker.kill()
        worker.wait(10)
        raise
    return worker


@pytest.mark.slow
@pytest.mark.p0
def test_jobs_claimed_ahead_behind_a_long_run_go_back_at_once_without_using_an_attempt():
    """Claimed in one batch behind a run that outlasts the short-run threshold, the three jobs go
    back to PENDING at once, in their place and with their attempt returned (another worker would take
    them at once); SIGTERM then drains the long run and starts none of them."""
    worker = _warm_one_slot_worker({})
    try:
        batch = Job.objects.enqueue_many(
            [
                NewJob("test.record", {"pause": 8}, priority=2),
                *(NewJob("test.record", priority=3) for _ in range(3)),
            ]
        )
        long, ahead = batch[0], batch[1:]
        wait_until(lambda: Execution.objects.filter(job_id=long).exists(), message="the long job started")
        wait_until(
            lambda: Job.objects.filter(id__in=ahead, status=JobStatus.PENDING).count() == 3,
            timeout=5,
            message="claimed-ahead jobs given back",
        )
        assert Job.objects.get(id=long).status == JobStatus.RUNNING
        for job in Job.objects.filter(id__in=ahead):
            assert (job.attempts, job.releases, job.worker_id, job.error_count) == (0, 0, None, 0)
        assert not Execution.objects.filter(job_id__in=ahead).exists()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    assert Job.objects.get(id=long).status == JobStatus.DONE
    assert Job.objects.filter(id__in=ahead, status=JobStatus.PENDING).count() == 3
    assert not Execution.objects.filter(job_id__in=ahead).exists()


@pytest.mark.slow
@pytest.mark.p0
def test_sigterm_during_short_runs_gives_claimed_ahead_jobs_back_without_using_an_attempt():
    worker = _warm_one_slot_worker({})
    try:
        ids = Job.objects.enqueue_many(NewJob("test.record") for _ in range(3000))
        wait_until(lambda: Execution.objects.count() >= 100, message="a stream of short runs")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    assert not Job.objects.filter(id__in=ids, status=JobStatus.RUNNING).exists()
    executed = set(Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True))
    assert executed == set(Job.objects.filter(id__in=ids, status=JobStatus.DONE).values_list("id", flat=True))
    pending = Job.objects.filter(id__in=ids, status=JobStatus.PENDING)
    assert pending.count() == 3000 - len(executed)
    assert not pending.exclude(attempts=0, releases=0).exists()  # given back, never a release


@pytest.mark.serial  # kills a worker or cuts its link: never beside other database tests
@pytest.mark.slow
@pytest.mark.p0
def test_sigkill_with_jobs_claimed_ahead_loses_none_and_runs_again_only_what_it_held():
    worker = _warm_one_slot_worker(FAST_LEASE)
    ids = Job.objects.enqueue_many(NewJob("test.record") for _ in range(3000))
    wait_until(lambda: Execution.objects.count() >= 100, message="a stream of short runs")
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)
    held = set(Job.objects.filter(id__in=ids, status=JobStatus.RUNNING).values_list("id", flat=True))
    assert len(held) > 1, "one slot: all but one of the jobs it held were claimed ahead"
    reaped: set[int] = set()  # their leases expire one by one (each from its own claim or last beat)
    wait_until(lambda: reaped.update(Job.objects.reap()) or reaped >= held, message="lease expiry")
    rescuer = start_worker("--burst", "--worker-id", "rescuer", env=FAST_LEASE)
    assert rescuer.wait(120) == 0
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 3000
    runs = Counter(Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True))
    twice = [job_id for job_id, n in runs.items() if n > 1]
    # Only jobs the killed worker held ran again: the one in its slot, and any that had finished but
    # whose DONE its dispatcher had not written yet (a slot takes its next job at once, while the
    # dispatcher writes in the background: docs/guide/worker.md), never a job already DONE.
    assert set(twice) <= held
    assert set(runs) == set(ids)


@pytest.mark.slow
@pytest.mark.p0
def test_jobs_claimed_ahead_never_wait_behind_a_long_run_while_another_worker_is_idle(worker_thread):
    """Two one-slot workers: the jobs claimed ahead behind the first one's long run go back at once
    and the idle second worker runs them while the long run goes on."""
    worker = _warm_one_slot_worker({})
    try:
        batch = Job.objects.enqueue_many(
            [
                NewJob("test.record", {"pause": 20}, priority=2),
                *(NewJob("test.record", priority=3) for _ in range(6)),
            ]
        )
        long, quick = batch[0], batch[1:]
        wait_until(lambda: Execution.objects.filter(job_id=long).exists(), message="the long job started")
        worker_thread({"default": 1}, worker_id="idle")
        wait_until(
            lambda: Job.objects.filter(id__in=quick, status=JobStatus.DONE).count() == 6,
            timeout=15,
            message="the quick jobs done while the long one runs",
        )
        assert Job.objects.get(id=long).status == JobStatus.RUNNING
        assert set(Execution.objects.filter(job_id__in=quick).values_list("worker_id", flat=True)) == {"idle"}
        assert not Job.objects.filter(id__in=quick).exclude(attempts=1).exists()  # given back: no attempt
    finally:
        worker.kill()
        worker.wait(10)


@pytest.mark.serial  # kills a worker or cuts its link: never beside other database tests
@pytest.mark.slow
@pytest.mark.p0
def test_a_cut_link_never_lets_a_worker_start_a_claimed_ahead_job_another_worker_took(
    tmp_path, worker_thread
):
    """Worker A reaches PostgreSQL through a proxy that stops forwarding as A starts the first of
    three jobs it claimed in one batch (lease 2 s, heartbeat 0.5 s). The reaper takes the two it never
    started back after the lease, worker B runs them; A, whose link stays cut past its own run, must
    never start them: each side effect (a line in a file, written without the database) happens once."""
    marks = tmp_path / "marks"
    db = connection.settings_dict
    target = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    with PausableProxy(target) as proxy:
        url = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
        worker = _warm_one_slot_worker({**FAST_LEASE, "DATABASE_URL": url}, worker_id="cut")
        try:
            batch = Job.objects.enqueue_many(
                [
                    NewJob("test.mark", {"path": str(marks), "seconds": 5}, priority=2),
                    *(NewJob("test.mark", {"path": str(marks)}, priority=3) for _ in range(2)),
                ]
            )
            wait_until(lambda: marks.exists() and marks.read_text(), interval=0.001, message="the first run")
            proxy.pause()
            held_by_a = Job.objects.filter(id__in=batch[1:], status=JobStatus.RUNNING)
            wait_until(  # reaped when their lease runs out (unless given back before the cut)
                lambda: Job.objects.reap() is None or not held_by_a.exists(),
                timeout=20,
                message="the lease of the unstarted jobs ran out",
            )
            worker_thread({"default": 1}, worker_id="rescuer")
            wait_until(
                lambda: Job.objects.filter(id__in=batch[1:], status=JobStatus.DONE).count() == 2,
                message="the rescuer ran them",
            )
            # A's run ends 5 s after it began, its link still cut; then its slot comes to the next
            # job at once (give it a second, the link still cut), and a SIGTERM drains it
            wait_until(
                lambda: f"{batch[0]} cut end" in marks.read_text(), timeout=20, message="A's run ended"
            )
            time.sleep(1)
        finally:
            proxy.resume()
            worker.terminate()
            worker.wait(30)
    starts = [line.split() for line in marks.read_text().splitlines() if line.endswith(" start")]
    runs = Counter(int(job_id) for job_id, _, _ in starts)
    assert [runs[job_id] for job_id in batch[1:]] == [1, 1], starts
    assert {who for job_id, who, _ in starts if int(job_id) != batch[0]} == {"rescuer"}


@pytest.mark.p1
def test_release_unstarted_is_fenced_and_returns_the_attempt():
    job_id = Job.objects.enqueue("test.noop")
    job = Job.objects.claim("w1")
    assert Job.objects.release_unstarted("w2", [(job_id, job.fence)]) == []  # not the owner
    assert Job.objects.release_unstarted("w1", [(job_id, job.fence + 1)]) == []  # not this run
    assert Job.objects.release_unstarted("w1", [(job_id, job.fence)]) == [job_id]
    row = Job.objects.get(id=job_id)
    assert (row.status, row.attempts, row.releases, row.worker_id, row.started_at) == (
        JobStatus.PENDING, 0, 0, None, None,
    )  # fmt: skip
    assert row.run_at == job.run_at  # its place in the queue is kept


def _entry(worker, job, renewed_at: float) -> Running:
    lane = worker.lanes["default"]
    entry = Running(job, job.fence, job.attempts, lane, None, renewed_at=renewed_at)
    worker._running[entry.key] = entry
    return entry


@pytest.mark.p0
def test_a_slot_never_starts_a_job_whose_lease_may_have_run_out(settings):
    """Started only while the last renewal the worker knows of is younger than the lease less one
    heartbeat; never once a heartbeat found the job lost."""
    settings.JOBQ = {**settings.JOBQ, "LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 2}
    worker = Worker({"default": 1}, worker_id="w")
    Job.objects.enqueue("test.noop")
    job = Job.objects.claim("w")
    now = time.monotonic()
    assert worker._still_ours(_entry(worker, job, renewed_at=now - 7.9))
    assert not worker._still_ours(_entry(worker, job, renewed_at=now - 8.1))
    lost = _entry(worker, job, renewed_at=now)
    lost.lost = True
    assert not worker._still_ours(lost)


@pytest.mark.p0
def test_a_heartbeat_renews_what_it_still_owns_and_marks_the_rest_lost():
    worker = Worker({"default": 1}, worker_id="w")
    Job.objects.enqueue_many([NewJob("test.noop"), NewJob("test.noop")])
    kept, taken = Job.objects.claim_batch("w", 2)
    old = time.monotonic() - 100
    kept_entry, taken_entry = _entry(worker, kept, old), _entry(worker, taken, old)
    Job.objects.filter(id=taken.id).update(worker_id="another", fence=taken.fence + 1)
    before = time.monotonic()
    worker._heartbeat(30)
    assert kept_entry.renewed_at >= before and not kept_entry.lost
    assert taken_entry.renewed_at == old and taken_entry.lost


@pytest.mark.p0
@pytest.mark.parametrize("why", ["the database is away", "the statement was refused"])
def test_a_give_back_the_database_did_not_take_keeps_the_jobs_and_is_tried_again(monkeypatch, why):
    """The database away while a lane gives back jobs claimed ahead (a restart), or the statement
    refused (a row held past LOCK_TIMEOUT): they stay the worker's (tracked, so heartbeats renew them;
    never started, never dropped from memory while RUNNING), and go back at the next try."""
    from django.db import OperationalError, ProgrammingError

    from django_jobq.managers.consuming import ConsumerManager

    worker = Worker({"default": 1}, worker_id="w")
    lane = worker.lanes["default"]
    Job.objects.enqueue_many([NewJob("test.noop"), NewJob("test.noop")])
    entries = [_entry(worker, job, time.monotonic()) for job in Job.objects.claim_batch("w", 2)]
    lane.unstarted, lane.busy = list(entries), 2

    def away(*args, **kwargs):
        if why == "the database is away":
            raise OperationalError("the database system is shutting down")
        raise ProgrammingError("canceling statement due to lock timeout")

    with monkeypatch.context() as patch:
        patch.setattr(ConsumerManager, "release_unstarted", away)
        patch.setattr(time, "sleep", lambda seconds: None)  # _db's backoff between its three tries
        worker._give_back_unstarted(lane)
    assert lane.unstarted == entries and lane.busy == 2 and lane.give_back_at > time.monotonic()
    assert set(worker._running) == {entry.key for entry in entries}
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 2
    worker._give_back_unstarted(lane)  # the database answers again
    assert lane.unstarted == [] and lane.busy == 0 and worker._running == {}
    assert Job.objects.filter(status=JobStatus.PENDING, attempts=0).count() == 2
    worker._side_writer.close()
