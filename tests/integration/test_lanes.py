"""Lanes: a worker started without --queues serves every queue; the "*" lane serves every queue the
worker's other lanes do not; a queue with due jobs and no live worker is reported."""

import io

import pytest
from django.core.management import call_command

from django_jobq import InvalidJob, dashboard
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.worker import ALL_QUEUES, Worker
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db(transaction=True)]


def test_a_worker_without_queues_serves_every_queue():
    ids = [Job.objects.enqueue("test.noop", queue=q) for q in ("default", "emails", "reports", "emails")]
    out = io.StringIO()
    call_command("jobq_worker", "--burst", stdout=out)
    assert "stopped after 4 job(s)" in out.getvalue()
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 4
    assert WorkerRecord.objects.get().lanes == {ALL_QUEUES: 4}


def test_the_star_lane_claims_only_queues_no_other_lane_serves():
    emails = Job.objects.enqueue_many(NewJob("test.noop", queue="emails") for _ in range(3))
    other = Job.objects.enqueue_many(NewJob("test.noop", queue=q) for q in ("a", "b", "c"))
    done, claimed = Job.objects.complete_and_claim("w1", [], 10, None, exclude=["emails"])
    assert not done.ended and sorted(j.id for j in claimed) == sorted(other)
    assert Job.objects.filter(id__in=emails, status=JobStatus.PENDING).count() == 3
    # Its orphan release (after a lost claim reply) stays within the same queues.
    Job.objects.claim_batch("w1", 10, queues=["emails"])
    released = Job.objects.release_orphans("w1", None, known=[], exclude=["emails"])
    assert sorted(released) == sorted(other)
    assert Job.objects.filter(id__in=emails, status=JobStatus.RUNNING).count() == 3


def test_named_lanes_and_the_star_lane_together_drain_everything():
    ids = [Job.objects.enqueue("test.noop", queue=q) for q in ("emails", "x", "y") for _ in range(5)]
    worker = Worker({"emails": 1, ALL_QUEUES: 2}, burst=True)
    assert worker.lanes[ALL_QUEUES].exclude == ("emails",)
    worker.run()
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 15


def test_a_notification_for_any_queue_wakes_the_star_lane(worker_thread):
    worker = worker_thread({ALL_QUEUES: 1}, poll_interval=600)
    wait_until(lambda: worker.listener and worker.listener.connected.is_set(), message="listening")
    wait_until(lambda: WorkerRecord.objects.filter(worker_id=worker.worker_id).exists())
    jid = Job.objects.enqueue("test.noop", queue="rarely-used")
    wait_until(lambda: Job.objects.get(id=jid).status == JobStatus.DONE, timeout=10, message="woken")


def test_star_is_not_a_queue_name():
    with pytest.raises(InvalidJob, match="every queue"):
        Job.objects.enqueue("test.noop", queue="*")


def test_queues_with_due_jobs_and_no_live_worker_are_reported():
    Job.objects.enqueue("test.noop", queue="emails")
    Job.objects.enqueue("test.noop", queue="default")
    WorkerRecord.objects.create(worker_id="w:1", hostname="w", pid=1, lanes={"default": 2})
    assert dashboard.snapshot().unserved == ("emails",)
    out = io.StringIO()
    call_command("jobq_stats", stdout=out)
    assert "no live worker serving: emails" in out.getvalue()
    WorkerRecord.objects.create(worker_id="w:2", hostname="w", pid=2, lanes={ALL_QUEUES: 1})
    assert dashboard.snapshot().unserved == ()
