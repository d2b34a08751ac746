"""The admin's cancel action: PENDING jobs end CANCELLED, RUNNING ones are asked to stop, finished
ones are left alone; it needs its own permission and is logged for each job it changed."""

import pytest
from django.contrib.admin.models import CHANGE, LogEntry

from django_jobq.models import Job, JobStatus
from tests.integration.conftest import dead_job, make_job, running_job

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"


def cancel(client, jobs):
    data = {"action": "cancel_selected", "index": "0", "_selected_action": [str(job.pk) for job in jobs]}
    return client.post(JOBS, data, follow=True)


def status(job) -> JobStatus:
    return JobStatus(Job.objects.values_list("status", flat=True).get(pk=job.pk))


@pytest.mark.p1
def test_cancel_selected_cancels_pending_asks_running_and_leaves_finished_jobs(staff):
    client = staff("view_job", "cancel_job")
    pending, running, dead = make_job(), running_job(), dead_job()
    response = cancel(client, [pending, running, dead])
    assert response.status_code == 200
    assert [str(m) for m in response.context["messages"]] == [
        "Cancelled 1 pending job(s); asked 1 running job(s) to stop."
    ]
    assert (status(pending), status(running), status(dead)) == (
        JobStatus.CANCELLED, JobStatus.RUNNING, JobStatus.DEAD,
    )  # fmt: skip
    asked = Job.objects.get(pk=running.pk)
    assert asked.cancel_requested_at is not None and asked.cancelled_by == f"admin {client.user.username}"
    logged = set(LogEntry.objects.filter(action_flag=CHANGE).values_list("object_id", "change_message"))
    assert logged == {(str(pending.pk), "Cancelled"), (str(running.pk), "Cancelled")}


@pytest.mark.p1
def test_cancel_needs_its_permission_and_is_not_offered_on_the_dead_letters(staff):
    viewer = staff("view_job", "requeue_job")
    job = make_job()
    page = viewer.get(JOBS).content.decode()
    assert "cancel_selected" not in page
    cancel(viewer, [job])
    assert status(job) == JobStatus.PENDING
    allowed = staff("view_job", "cancel_job")
    assert "cancel_selected" in allowed.get(JOBS).content.decode()
    assert "cancel_selected" not in allowed.get(DEAD).content.decode()


def test_a_cancelled_job_shows_its_status_and_can_be_requeued_from_its_page(staff):
    client = staff("view_job", "cancel_job", "requeue_job")
    job = make_job()
    cancel(client, [job])
    page = client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert 'class="jobq-status jobq-cancelled"' in page and 'id="jobq-requeue-link"' in page
    client.post(f"{JOBS}{job.pk}/requeue/", {})
    assert status(job) == JobStatus.PENDING
