"""The reaper's loop: it survives the database going away under any of its connections, and a backlog
of rows to prune is worked off pass after pass, not one bounded pass per interval."""

import datetime as dt
import threading

import psycopg
import pytest
import time_machine
from django.db import connections
from django.utils import timezone

from django_jobq import ratelimit
from django_jobq.dedupe import MAX_MARK_BATCHES
from django_jobq.models import InboundMark, Job, JobStatus
from django_jobq.notify.listener import connection_params
from django_jobq.reaper import Reaper
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.p0
def test_a_lost_rate_limit_connection_does_not_end_the_reaper(monkeypatch):
    """The rate-limit prune runs on the autocommit pool (psycopg, not Django): a restart of the
    database there is retried on the next pass like any other database error."""
    calls = []
    real_prune = ratelimit.prune

    def prune(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")
        return real_prune(**kwargs)

    monkeypatch.setattr(ratelimit, "prune", prune)
    stopping = threading.Event()
    reaper = Reaper(interval=0.05)

    def run():
        try:
            reaper.run(stopping)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(calls) >= 3, timeout=10, message="passes after the error")
        assert thread.is_alive()
    finally:
        stopping.set()
        thread.join(10)
    assert not thread.is_alive()


def expired_marks(count: int, namespace: str = "burst") -> None:
    past = timezone.now() - dt.timedelta(hours=1)
    InboundMark.objects.bulk_create(
        InboundMark(namespace=namespace, key=f"evt-{i}", seen_at=past, expires_at=past) for i in range(count)
    )


@pytest.mark.p1
def test_marks_expiring_faster_than_one_pass_prunes_are_all_deleted_before_the_next_interval(settings):
    """A pass deletes at most MAX_MARK_BATCHES x PRUNE_BATCH marks (4 x 5000 by default, every
    REAP_INTERVAL of 5 s: 4000 a second). Above that rate jobq_inbound used to grow without end: each
    pass left what exceeded its bound for the next one, five seconds later, while more kept expiring.
    A pass that stops at its bound now reports a backlog and the next pass follows at once, so the
    prune keeps up with whatever the database can delete. Here PRUNE_BATCH 5 and more than one pass's
    bound expired; the loop's interval is an hour, so only passes run back to back can delete them all."""
    settings.JOBQ = {**settings.JOBQ, "PRUNE_BATCH": 5}
    expired_marks(3 * MAX_MARK_BATCHES * 5 + 2)
    first = Reaper().run_once()
    assert (first.pruned_marks, first.backlog) == (MAX_MARK_BATCHES * 5, True)
    stopping = threading.Event()
    reaper = Reaper(interval=3600)

    def run():
        try:
            reaper.run(stopping)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: not InboundMark.objects.exists(), timeout=30, message="every expired mark deleted")
    finally:
        stopping.set()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.p1
def test_reap_once_works_off_the_whole_backlog(settings):
    """``jobq_reap --once`` (for cron) runs passes while a backlog remains: one bounded pass per cron
    run would fall behind the same way."""
    from django.core.management import call_command

    settings.JOBQ = {**settings.JOBQ, "PRUNE_BATCH": 5}
    expired_marks(2 * MAX_MARK_BATCHES * 5 + 1)
    call_command("jobq_reap", "--once")
    assert not InboundMark.objects.exists()


def notifications(listen: psycopg.Connection, timeout: float = 0.5) -> list[str]:
    return [n.payload for n in listen.notifies(timeout=timeout)]


@pytest.mark.p1
def test_a_job_the_reaper_puts_back_to_pending_wakes_a_waiting_worker(a_worker_waits, python_clock):
    """A reaped job is due at once, but the reap used to send no NOTIFY: a worker asleep waiting for
    work found it only at its next poll (POLL_INTERVAL later). The reap now notifies the queue of every
    job it puts back to PENDING, as an enqueue does (only while a worker may be waiting, postgres_terms
    .wake); a job it moves to DEAD wakes no worker."""
    with psycopg.connect(**connection_params("default"), autocommit=True) as listen:
        listen.execute("LISTEN jobq")
        with time_machine.travel(timezone.now(), tick=False) as clock:
            back = Job.objects.enqueue("test.noop", queue="again")
            dead = Job.objects.enqueue("test.noop", queue="spent", max_attempts=1)
            assert len(Job.objects.claim_batch("vanished", 2, lease_seconds=5)) == 2
            assert sorted(notifications(listen)) == ["again", "spent"]  # the enqueues'
            clock.shift(10)
            assert sorted(Reaper().run_once().reaped) == sorted([back, dead])
        assert notifications(listen) == ["again"]
    assert Job.objects.get(id=dead).status == JobStatus.DEAD


@pytest.mark.django_db
def test_the_reaper_warns_once_when_autovacuum_never_vacuums_the_job_table(caplog):
    """Taking up its role, the reaper says that nothing vacuums jobq_job (here the table opts out, in
    this test's transaction, rolled back after it); renewing the role does not say it again."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE jobq_job SET (autovacuum_enabled = off)")
    reaper = Reaper(interval=0.05)
    with caplog.at_level("WARNING", logger="django_jobq"):
        assert reaper.acquire() and reaper.acquire()
    warnings = [
        r.getMessage() for r in caplog.records if "autovacuum does not vacuum jobq_job" in r.getMessage()
    ]
    assert len(warnings) == 1
    reaper.release()
