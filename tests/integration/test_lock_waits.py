"""A job whose row an application's transaction holds (here: enqueueing a dependent of the running job
in a transaction that stays open) while its worker runs it (worker/lock_waits.py): the heartbeat never
counts that lease renewed; it waits for the row, so a reaper pass after the commit finds the lease
renewed and never hands the job to another run; and the lane goes on claiming and running other jobs
while the finished job's completion waits for the row."""

import threading

import pytest
from django.db import connections, transaction

from django_jobq.models import Job, JobStatus
from tests.conftest import wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class HeldRow:
    """An application's transaction, on a thread (and connection) of its own, that enqueues a
    dependent of ``job_id`` (which locks the job's row) and stays open until release()."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.locked = threading.Event()
        self.release = threading.Event()
        self.dependent: int | None = None
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()
        assert self.locked.wait(30), "the application's transaction did not start"

    def _hold(self) -> None:
        try:
            with transaction.atomic():
                self.dependent = Job.objects.enqueue("test.noop", depends_on=[self.job_id])
                self.locked.set()
                self.release.wait(120)
        finally:
            connections.close_all()

    def commit(self) -> None:
        self.release.set()
        self.thread.join(30)


def running(job_id: int) -> bool:
    return Execution.objects.filter(job_id=job_id).exists()


@pytest.mark.p0
def test_a_lease_whose_row_another_transaction_holds_past_the_lease_is_never_reaped(settings, worker_thread):
    settings.JOBQ = {**settings.JOBQ, "LEASE_SECONDS": 2, "HEARTBEAT_SECONDS": 0.5, "POLL_INTERVAL": 0.2}
    worker_thread({"default": 1})
    job_id = Job.objects.enqueue("test.record", {"pause": 5})
    wait_until(lambda: running(job_id), message="the run started")
    held = HeldRow(job_id)
    try:
        # the heartbeat found the row held and its renewal now waits in the row's lock queue (a thread and
        # connection of its own: on a loaded machine that takes a moment, and a lease that ran out
        # before the renewal queued is one the worker failed to renew in time, which the reaper may take)
        wait_until(_renewal_waits_for_the_row, timeout=30, message="the renewal waits for the row")
        # longer than the lease: a heartbeat that counted the skipped row renewed would lose the job
        wait_until(lambda: Job.objects.filter(id=job_id, lease_until__lt=_db_now()).exists(), timeout=30,
                   message="the lease ran out while the row was held")  # fmt: skip
    finally:
        held.commit()
    for _ in range(20):  # reaper passes right after the commit, as many as the run has time for
        Job.objects.reap()
    job = Job.objects.get(id=job_id)
    assert job.status in (JobStatus.RUNNING, JobStatus.DONE) and job.attempts == 1, "reaped from its live run"
    wait_until(lambda: Job.objects.filter(id=job_id, status=JobStatus.DONE).exists(), message="it finished")
    assert Execution.objects.filter(job_id=job_id).count() == 1
    assert Job.objects.get(id=held.dependent).status in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DONE)


@pytest.mark.p0
def test_a_lane_goes_on_while_a_finished_jobs_row_is_held(settings, worker_thread):
    # a lock wait longer than the test waits: a lane that waited for the row would stall past it
    settings.JOBQ = {**settings.JOBQ, "LOCK_TIMEOUT": 300, "STATEMENT_TIMEOUT": 300}
    worker_thread({"default": 2})
    first = Job.objects.enqueue("test.record", {"pause": 0.5})
    wait_until(lambda: running(first), message="the first run started")
    held = HeldRow(first)
    try:
        others = [Job.objects.enqueue("test.record") for _ in range(10)]
        # the first run ends while its row is held: its completion waits, the lane does not
        wait_until(
            lambda: Job.objects.filter(id__in=others, status=JobStatus.DONE).count() == 10,
            timeout=60, message="the other jobs ran while the row was held",
        )  # fmt: skip
        assert Job.objects.get(id=first).status == JobStatus.RUNNING  # its completion still waits
    finally:
        held.commit()
    wait_until(lambda: Job.objects.filter(id=first, status=JobStatus.DONE).exists(), message="written")
    assert Execution.objects.filter(job_id=first).count() == 1


def _db_now():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def _renewal_waits_for_the_row() -> bool:
    """Some session of this database waits for a row lock in worker/lock_waits.py's LOCK_JOB."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            ["%FOR NO KEY UPDATE%"],
        )
        return bool(cursor.fetchone()[0])
