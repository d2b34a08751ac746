"""The console's bulk actions on every engine (django_jobq.console.bulk): batches over a selection,
through the same guarded statements on PostgreSQL and SQLite, requeued jobs spread over an interval."""

import datetime as dt

import pytest
from django.utils import timezone

from django_jobq.console import bulk
from django_jobq.console.selection import Selection
from django_jobq.models import BulkAction, Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.django_db]


def jobs(count: int, **fields) -> list[int]:
    values = {"task": "test.noop", "queue": "bulk", **fields}
    return [Job.objects.create(**values).pk for _ in range(count)]


def run(kind: str, selection: Selection, size: int, **options) -> BulkAction:
    total = bulk.eligible(selection.jobs("default"), kind).count()
    action = bulk.start(kind, selection, total, options=options, by="admin ops", query="")
    while (action := bulk.run_batch(action.pk, size)).state == BulkAction.State.RUNNING:
        pass
    return action


def newest() -> int:
    return Job.objects.order_by("-id").values_list("id", flat=True).first() or 0


@pytest.mark.p0
def test_a_bulk_requeue_spreads_the_jobs_over_the_interval_in_batches():
    dead = jobs(11, status=JobStatus.DEAD, finished_at=timezone.now())
    done = jobs(2, status=JobStatus.DONE, finished_at=timezone.now())
    action = run("requeue", Selection(queue="bulk", until=newest()), 4, spread=600)
    assert (action.state, action.total, action.done, action.skipped) == ("done", 11, 11, 0)
    run_ats = list(Job.objects.filter(pk__in=dead, status=JobStatus.PENDING).values_list("run_at", flat=True))
    assert len(run_ats) == 11 and len(set(run_ats)) > 1
    start = action.created_at
    assert all(start - dt.timedelta(seconds=1) <= r <= start + dt.timedelta(seconds=601) for r in run_ats)
    assert set(Job.objects.filter(pk__in=done).values_list("status", flat=True)) == {JobStatus.DONE}


@pytest.mark.p1
def test_a_requeue_without_spread_keeps_the_run_at_exact():
    (dead,) = jobs(1, status=JobStatus.DEAD, finished_at=timezone.now())
    when = dt.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    assert Job.objects.requeue_many([dead], run_at=when) == [dead]
    assert Job.objects.get(pk=dead).run_at == when


@pytest.mark.p1
def test_a_bulk_cancel_and_a_bulk_delete_leave_what_they_must():
    pending = jobs(5)
    running = jobs(1, status=JobStatus.RUNNING, worker_id="w1", lease_until=timezone.now())
    action = run("cancel", Selection(queue="bulk", until=newest()), 2)
    assert (action.done, action.total) == (6, 6)
    assert set(Job.objects.filter(pk__in=pending).values_list("status", flat=True)) == {JobStatus.CANCELLED}
    asked = Job.objects.get(pk=running[0])
    assert asked.status == JobStatus.RUNNING and asked.cancelled_by == "admin ops"
    action = run("delete", Selection(queue="bulk", until=newest()), 2)
    assert action.done == 5  # never the running job
    assert list(Job.objects.filter(queue="bulk").values_list("pk", flat=True)) == running
