"""The idle lock: enqueues NOTIFY only while a worker may be waiting for work, and no wake-up is lost
when an enqueue's transaction spans the moment a worker goes idle. Real workers, real PostgreSQL
locks and notifications; the workers poll once an hour, so only a wake-up can start a job in time."""

import psycopg
import pytest

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.notify import idle_lock
from django_jobq.notify.idle_lock import IdleLock
from django_jobq.notify.listener import connection_params
from django_jobq.sql.postgres.bulk import BULK_MIN_ROWS
from django_jobq.sql.postgres.jobs import WAIT_MARK
from tests.conftest import open_enqueue, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HOUR = 3600.0


def notifications(listen: psycopg.Connection, timeout: float = 0.5) -> list[str]:
    return [n.payload for n in listen.notifies(timeout=timeout)]


# Locks of this database only: another database on the same server (another test run) has its own.
THIS_DATABASE = "database = (SELECT oid FROM pg_database WHERE datname = current_database())"


def waiting_for_the_lock() -> int:
    """Sessions queued for the idle lock, not granted yet."""
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND {THIS_DATABASE}"
        ).fetchone()
    return int(row[0])


@pytest.fixture
def listen():
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        conn.execute("LISTEN jobq")
        yield conn


@pytest.fixture
def lock():
    started: list[IdleLock] = []

    def start() -> IdleLock:
        held = IdleLock(lambda: None)
        held.start()
        started.append(held)
        return held

    yield start
    for held in started:
        held.stop()
        held.join(timeout=10)
        assert not held.is_alive()


def test_enqueues_notify_only_while_a_lane_may_be_waiting(listen, lock, monkeypatch):
    monkeypatch.setattr(idle_lock, "RELEASE_AFTER", 0.1)
    Job.objects.enqueue("test.noop")
    assert notifications(listen) == []  # no worker waits: the commit carried no NOTIFY

    held = lock()
    held.report("default", starved=True)
    wait_until(held.held.is_set, message="idle lock taken")
    assert notifications(listen) == [""]  # taken: every worker claims again
    Job.objects.enqueue("test.noop")
    assert notifications(listen) == ["default"]

    held.report("default", starved=False)  # the lane filled up
    wait_until(lambda: not held.held.is_set(), message="idle lock let go")
    Job.objects.enqueue("test.noop")
    Job.objects.enqueue_many([NewJob("test.noop") for _ in range(3)])  # one statement
    Job.objects.enqueue_many([NewJob("test.noop") for _ in range(BULK_MIN_ROWS)])  # COPY
    assert notifications(listen) == []
    held.report("default", starved=True)
    wait_until(held.held.is_set, message="idle lock taken again")
    assert notifications(listen) == [""]
    Job.objects.enqueue_many([NewJob("test.noop") for _ in range(BULK_MIN_ROWS)])
    assert notifications(listen) == ["default"]


def test_an_enqueue_open_while_a_worker_goes_idle_runs_when_it_commits(worker_thread):
    """The race the lock closes: an enqueue that found no worker waiting (no NOTIFY) and is still
    uncommitted when the worker's last claim looks (and finds nothing). The worker's request for the
    lock waits for that transaction; when it commits, the worker claims again and runs its job."""
    thread, commit, open_job = open_enqueue()
    worker = worker_thread({"default": 1}, poll_interval=HOUR)
    wait_until(lambda: waiting_for_the_lock() == 1, message="the worker waits for the idle lock")
    assert not worker.idle_lock.held.is_set()

    # Meanwhile an enqueue sees the worker queued for the lock: it notifies, and runs at once.
    later = Job.objects.enqueue("test.noop")
    wait_until(lambda: Job.objects.get(id=later).status == JobStatus.DONE, timeout=10, message="notified job")

    commit.set()
    thread.join(10)
    wait_until(
        lambda: Job.objects.get(id=open_job[0]).status == JobStatus.DONE, timeout=10, message="the open job"
    )
    assert worker.idle_lock.held.is_set()


def test_an_enqueue_that_finds_nobody_asking_runs_while_an_open_enqueue_keeps_the_lock_away(
    worker_thread, listen, monkeypatch
):
    """A worker waits behind enqueues in flight only so long, then asks again. An enqueue in between
    finds no hold and no request, so it sends no notification; and while an enqueue's transaction
    stays open the lock is never granted, so no grant makes the lanes claim again. They claim again
    every TAKE_WAIT_SECONDS meanwhile and find it."""
    monkeypatch.setattr(idle_lock, "TAKE_WAIT_SECONDS", 0.3)
    monkeypatch.setattr(idle_lock, "ASK_AGAIN_SECONDS", 1.0)  # a wide gap between two waits
    thread, commit, open_job = open_enqueue()
    worker = worker_thread({"default": 1}, poll_interval=HOUR)
    try:
        wait_until(lambda: worker.idle_lock and worker.idle_lock.asked.is_set(), message="a wait ran out")
        for _ in range(20):  # an enqueue in a gap: it commits without a notification
            wait_until(lambda: waiting_for_the_lock() == 0, message="a gap between two waits")
            later = Job.objects.enqueue("test.noop")
            if "default" not in notifications(listen, timeout=0.2):
                break
        else:
            pytest.fail("every enqueue met a worker's wait")
        wait_until(lambda: Job.objects.get(id=later).status == JobStatus.DONE, timeout=10,
                   message="the job of the enqueue that did not notify")  # fmt: skip
        assert not worker.idle_lock.held.is_set()  # the open enqueue still keeps the lock away
    finally:
        commit.set()
        thread.join(10)
    wait_until(
        lambda: Job.objects.get(id=open_job[0]).status == JobStatus.DONE, timeout=10, message="the open job"
    )


def test_the_worker_that_takes_the_lock_tells_the_others_to_claim_again(worker_thread, lock):
    """Another worker (here a bare IdleLock, with no lane for the queue) asks for the lock first, so
    it gets it when the open enqueue commits, while this worker, finding it asked for, does not queue
    behind it: only the taker's notification ("claim again") can tell this worker about the job."""
    thread, commit, open_job = open_enqueue()
    other = lock()
    other.report("elsewhere", starved=True)
    wait_until(lambda: waiting_for_the_lock() == 1, message="the other worker waits for the lock")
    worker = worker_thread({"default": 1}, poll_interval=HOUR)
    wait_until(lambda: worker.idle_lock and worker.idle_lock.asked.is_set(), message="this worker asked")
    assert waiting_for_the_lock() == 1  # not queued behind the other worker
    commit.set()
    thread.join(10)
    wait_until(other.held.is_set, message="the other worker took the lock")
    wait_until(
        lambda: Job.objects.get(id=open_job[0]).status == JobStatus.DONE, timeout=10, message="the open job"
    )
    assert not worker.idle_lock.held.is_set()  # still queued: woken by the notification alone


def test_a_worker_never_queues_behind_another_workers_hold_and_takes_the_lock_when_it_is_let_go(
    lock, monkeypatch
):
    """A session waiting for a lock keeps a snapshot, which holds back vacuum in the whole database
    for as long as it waits; another worker's hold lasts as long as its lanes are short of work. So a
    second idle worker asks again now and then instead of queueing, and has the lock soon after the
    first lets it go. Enqueues notify all along: one holder is enough."""
    monkeypatch.setattr(idle_lock, "RELEASE_AFTER", 0.1)
    first, second = lock(), lock()
    first.report("a", starved=True)
    wait_until(first.held.is_set, message="the first worker holds the lock")
    second.report("b", starved=True)
    wait_until(second.asked.is_set, message="the second worker asked for it")
    assert waiting_for_the_lock() == 0 and not second.held.is_set()
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        waiting = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobq-idle-lock'"
            " AND datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()[0]
    assert waiting == 0  # no idle-lock session sits in a lock wait, holding a snapshot
    first.report("a", starved=False)
    wait_until(second.held.is_set, timeout=10, message="the second worker took the lock once it was let go")
    assert not first.held.is_set()


def test_a_full_lane_lets_the_lock_go_and_claims_without_notifications(worker_thread, listen, settings):
    """While every slot is busy, enqueues commit without NOTIFY; the lane takes the job when a slot
    frees, since it claims whenever it has room."""
    settings.JOBQ = {**settings.JOBQ, "CLAIM_AHEAD": 0}
    busy = Job.objects.enqueue("test.sleep", {"seconds": 1.5})
    worker = worker_thread({"default": 1}, poll_interval=HOUR)
    wait_until(lambda: Job.objects.get(id=busy).status == JobStatus.RUNNING, message="the slow job runs")
    wait_until(lambda: not worker.idle_lock.held.is_set(), timeout=5, message="lock let go")
    notifications(listen, timeout=0.1)  # what came before
    queued = Job.objects.enqueue("test.noop")
    assert notifications(listen, timeout=0.3) == []
    wait_until(lambda: Job.objects.get(id=queued).status == JobStatus.DONE, timeout=10, message="queued job")


def test_the_lock_is_taken_again_after_its_connection_is_killed(lock):
    held = lock()
    held.report("default", starved=True)
    wait_until(held.held.is_set, message="idle lock taken")
    first = _lock_holders()
    assert len(first) == 1
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", first)
    wait_until(
        lambda: held.held.is_set() and len(now := _lock_holders()) == 1 and now != first,
        timeout=20,
        message="taken again on a new connection",
    )


def _lock_holders() -> list[int]:
    """The backends holding the idle lock."""
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'jobq-idle-lock'"
            f" AND {THIS_DATABASE}"
        ).fetchall()
    return [row[0] for row in rows]


def test_a_worker_whose_idle_lock_session_is_killed_takes_it_again_at_once(worker_thread, monkeypatch):
    """The server ends the idle lock's session: the worker notices on the socket, not at its health
    check (here an hour away, as is its poll), takes the lock again on a new session, and the next
    enqueue, which then notifies, starts at once."""
    monkeypatch.setattr(idle_lock, "HEALTH_CHECK_SECONDS", HOUR)
    worker = worker_thread({"default": 1}, poll_interval=HOUR)
    wait_until(lambda: worker.idle_lock and worker.idle_lock.held.is_set(), message="idle lock taken")
    first = _lock_holders()
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", first)
    wait_until(
        lambda: len(now := _lock_holders()) == 1 and now != first,
        timeout=30,
        message="the idle lock taken again on a new session",
    )
    job = Job.objects.enqueue("test.noop")
    wait_until(lambda: Job.objects.get(id=job).status == JobStatus.DONE, timeout=30, message="the job")


def claimed_and_found_nothing(worker) -> bool:
    """The worker's lane claimed and came back short: it holds the idle lock, or waits for it."""
    return bool(worker.idle_lock) and (worker.idle_lock.held.is_set() or waiting_for_the_lock() == 1)


def test_a_job_a_claim_skipped_while_wait_for_marked_it_runs_once_the_mark_commits(
    worker_thread, monkeypatch
):
    """wait_for() marks its job with an UPDATE whose row lock lasts until it commits; a claim meanwhile
    skips the row (SKIP LOCKED) and finds nothing else. The mark wakes workers as an enqueue does, so
    the job does not wait for the next poll (an hour here)."""
    monkeypatch.setattr(idle_lock, "TAKE_WAIT_SECONDS", HOUR)  # no periodic claim while the mark is open
    job_id = Job.objects.enqueue("test.noop")
    params = Job.objects._notify_params(Job.objects._common({"id": job_id}))
    with psycopg.connect(**connection_params("default")) as marking:  # not autocommit: left open
        assert marking.execute(WAIT_MARK, params).fetchone()[0] == job_id
        worker = worker_thread({"default": 1}, poll_interval=HOUR)
        wait_until(lambda: claimed_and_found_nothing(worker), message="a claim that skipped the marked job")
        assert Job.objects.get(id=job_id).status == JobStatus.PENDING
    wait_until(lambda: Job.objects.get(id=job_id).status == JobStatus.DONE, timeout=30,
               message="the marked job, once the mark committed")  # fmt: skip


def test_a_dependency_a_claim_skipped_while_a_dependent_was_enqueued_runs_once_that_commits(
    worker_thread, monkeypatch
):
    """Enqueueing a dependent locks its dependencies until the enqueue commits; a claim meanwhile skips
    them. The enqueue wakes workers for a due PENDING dependency, so it does not wait for the poll."""
    monkeypatch.setattr(idle_lock, "TAKE_WAIT_SECONDS", HOUR)
    first = Job.objects.enqueue("test.noop")
    thread, commit, dependent = open_enqueue(depends_on=[first])
    try:
        worker = worker_thread({"default": 1}, poll_interval=HOUR)
        wait_until(lambda: claimed_and_found_nothing(worker), message="a claim that skipped the dependency")
        assert Job.objects.get(id=first).status == JobStatus.PENDING
    finally:
        commit.set()
        thread.join(10)
    wait_until(lambda: Job.objects.get(id=dependent[0]).status == JobStatus.DONE, timeout=30,
               message="the dependency, then its dependent")  # fmt: skip
