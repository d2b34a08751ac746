"""A worker process killed in the middle of a batch (django_jobq.batches): every job of the batch comes
back by its lease and runs once more, in another worker, under a new fence; the killed run's late writes
are refused. Kills processes: never beside other database tests."""

import signal

import pytest

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import start_worker, wait_until
from tests.integration.test_crash_recovery import FAST_LEASE, stop
from tests.testapp.models import Ledger

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]


@pytest.mark.p0
def test_a_batch_killed_mid_call_comes_back_by_lease_and_each_job_runs_once_more():
    ids = Job.objects.enqueue_many(
        NewJob("test.ledger_batch", {"first_run_seconds": 120}) for _ in range(100)
    )
    doomed = start_worker("--worker-id", "doomed", "--concurrency", "1", env=FAST_LEASE)
    try:
        wait_until(lambda: Ledger.objects.filter(job_id__in=ids).count() == 100, timeout=60,
                   message="one call holding the whole batch")  # fmt: skip
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
    finally:
        stop(doomed, signal.SIGKILL)
    assert Job.objects.filter(id__in=ids, status=JobStatus.RUNNING, worker_id="doomed").count() == 100
    reaped = set()
    wait_until(lambda: reaped.update(Job.objects.reap()) or reaped >= set(ids), timeout=30,
               message="every lease expired")  # fmt: skip
    rescuer = start_worker("--burst", "--worker-id", "rescuer", "--concurrency", "2", env=FAST_LEASE)
    assert rescuer.wait(60) == 0
    for job in Job.objects.filter(id__in=ids):
        assert (job.status, job.worker_id, job.fence, job.attempts, job.result) == (
            JobStatus.DONE, "rescuer", 2, 2, {"fence": 2},
        )  # fmt: skip
    runs = set(Ledger.objects.filter(job_id__in=ids).values_list("job_id", "fence", "worker_id"))
    assert runs == {(i, 1, "doomed") for i in ids} | {(i, 2, "rescuer") for i in ids}
    assert Job.objects.complete(ids[0], "doomed", "late", fence=1) is False  # the killed run's late write
