"""Where jobq's own connections go and what they keep: the listener and wait_for() on
JOBQ["LISTEN_DATABASE"] (an alias or a DSN) or not listening at all (NOTIFY off), and no session
settings with JOBQ["POOL_MODE"] = "transaction"."""

import logging
import threading

import psycopg
import pytest
from django.db import connection

from django_jobq import autocommit
from django_jobq.models import Job
from django_jobq.notify.idle_lock import IdleLock
from django_jobq.notify.listener import Listener
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.p1, pytest.mark.django_db(transaction=True)]

UNREACHABLE = "postgres://postgres@127.0.0.1:1/nowhere"  # nothing listens on port 1


def dsn_of_test_db() -> str:
    db = connection.settings_dict
    return f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} user={db['USER']} dbname={db['NAME']}"


def jobq(settings, **options):
    settings.JOBQ = {**settings.JOBQ, **options}


def listen_once(timeout: float = 10.0) -> tuple[list, threading.Event]:
    """Start a Listener; enqueue on queue "mail" once it is connected; the payloads it saw. The idle
    lock is held throughout, as a worker with a lane waiting for work holds it (enqueues notify)."""
    payloads: list = []
    got = threading.Event()
    stopping = threading.Event()

    def wake(payload):
        payloads.append(payload)
        if payload == "mail":
            got.set()

    idle = IdleLock(lambda: None)
    idle.report("mail", starved=True)
    idle.start()
    listener = Listener(wake, stopping)
    try:
        assert idle.held.wait(timeout), "the idle lock was not taken"
        listener.start()
        assert listener.connected.wait(timeout), "the listener did not connect"
        Job.objects.enqueue("test.noop", queue="mail")
        got.wait(timeout)
    finally:
        stopping.set()
        idle.stop()
        if listener.is_alive():
            listener.join(timeout)
        idle.join(timeout)
    return payloads, got


@pytest.mark.parametrize("target", ["default", "dsn"])
def test_the_listener_listens_on_listen_database(settings, target):
    jobq(settings, LISTEN_DATABASE="default" if target == "default" else dsn_of_test_db())
    payloads, got = listen_once()
    assert got.is_set() and payloads == [None, "mail"]  # the reconnect wake, then the notification


def test_an_unreachable_listen_database_is_reported_and_retried(settings, caplog):
    jobq(settings, LISTEN_DATABASE=UNREACHABLE)
    stopping = threading.Event()
    listener = Listener(lambda payload: None, stopping)
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        listener.start()
        try:
            assert not listener.connected.wait(1.0)
        finally:
            stopping.set()
            listener.join(10)
    lost = [r.getMessage() for r in caplog.records if "LISTEN connection lost" in r.getMessage()]
    assert lost and "127.0.0.1" in lost[0] and "reconnecting" in lost[0]


def test_a_workers_listener_reports_its_losses_to_the_outage_log_once(settings, caplog):
    """In a worker, the listener's failed reconnects join the worker's outage: one line when it
    starts, however many attempts fail, then one when a connection is made again."""
    from django_jobq.worker.outage import Outage

    jobq(settings, LISTEN_DATABASE=UNREACHABLE)
    stopping, outage = threading.Event(), Outage("w-1")
    listener = Listener(lambda payload: None, stopping, outage.failed, outage.ok)
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        listener.start()
        try:
            wait_until(lambda: outage.failures >= 3, timeout=30, message="three failed reconnects")
        finally:
            stopping.set()
            listener.join(10)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "connection lost" in m]  # no line per attempt
    unreachable = [m for m in messages if "unreachable" in m]
    assert len(unreachable) == 1 and "LISTEN connection" in unreachable[0] and "127.0.0.1" in unreachable[0]

    jobq(settings, LISTEN_DATABASE="default")  # the database answers again: the end, logged once
    stopping = threading.Event()
    listener = Listener(lambda payload: None, stopping, outage.failed, outage.ok)
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        listener.start()
        try:
            assert listener.connected.wait(10)
        finally:
            stopping.set()
            listener.join(10)
    assert outage.started is None
    assert len([r for r in caplog.records if "reachable again" in r.getMessage()]) == 1


class Finisher(threading.Thread):
    """Claims and completes one job from another thread (its own connection); keeps what went wrong."""

    def __init__(self, job_id: int):
        super().__init__()
        self.job_id, self.error = job_id, None
        self.start()

    def run(self):
        from django.db import connections

        try:
            # A claim skips a row locked at that instant (wait_for's mark, SKIP LOCKED): try again.
            claimed = wait_until(lambda: Job.objects.claim("conn-test", queues=["default"]), timeout=10)
            assert claimed is not None and claimed.id == self.job_id, claimed
            assert Job.objects.complete(self.job_id, "conn-test", {"ok": True}, fence=claimed.fence)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            connections.close_all()


def test_wait_for_listens_on_listen_database(settings):
    jobq(settings, LISTEN_DATABASE=UNREACHABLE)
    job_id = Job.objects.enqueue("test.noop")
    with pytest.raises(psycopg.OperationalError):  # the LISTEN connection goes where the setting says
        Job.objects.wait_for(job_id, timeout=5)
    jobq(settings, LISTEN_DATABASE=dsn_of_test_db())
    finisher = Finisher(job_id)
    try:
        job = Job.objects.wait_for(job_id, timeout=30, poll=3600)  # only the NOTIFY ends it in time
    finally:
        finisher.join(10)
        assert finisher.error is None, repr(finisher.error)
    assert job.result == {"ok": True}


def test_wait_for_polls_without_listening_when_notify_is_off(settings):
    jobq(settings, NOTIFY=False, LISTEN_DATABASE=UNREACHABLE)  # never connected to: nothing listens
    job_id = Job.objects.enqueue("test.noop")
    finisher = Finisher(job_id)
    try:
        job = Job.objects.wait_for(job_id, timeout=30, poll=0.05)
    finally:
        finisher.join(10)
        assert finisher.error is None, repr(finisher.error)
    assert job.result == {"ok": True}


def _timeouts(conn) -> tuple[str, str]:
    return conn.execute(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
    ).fetchone()


@pytest.mark.parametrize(("mode", "expected"), [("session", ("30s", "5s")), ("transaction", None)])
def test_session_settings_only_outside_transaction_pooling(settings, mode, expected):
    jobq(settings, POOL_MODE=mode, NOTIFY=False, STATEMENT_TIMEOUT=30, LOCK_TIMEOUT=5)
    with psycopg.connect(dsn_of_test_db()) as fresh:
        defaults = _timeouts(fresh)
    want = expected or defaults
    autocommit.close_all()
    with autocommit.pool("default").connection() as conn:
        assert _timeouts(conn) == want
    Job.objects.bound_statements()
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')")
        assert cursor.fetchone() == want
    connection.close()  # the bounded session goes; the next test gets a fresh one
