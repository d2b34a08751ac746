"""Cancelling from the admin: the list's action and a job's Cancel button. PENDING jobs end CANCELLED,
RUNNING ones are asked to stop, finished ones are left alone; it needs its own permission; the list's
action is confirmed with the exact count and logged once per action. A cancel asked of a job that still
runs shows, with who asked and when; a job cancelled while it ran reads as cancelled, not as the
traceback its run ended with."""

import datetime as dt
import re

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.utils import timezone

from django_jobq.models import Job, JobStatus
from tests.conftest import wait_until
from tests.integration.conftest import dead_job, make_job, running_job

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"


def cancel(client, jobs, confirm=True):
    """The list's cancel action for ``jobs``, confirmed (the confirmation page's post=yes) or not."""
    data = {"action": "cancel_selected", "index": "0", "_selected_action": [str(job.pk) for job in jobs]}
    return client.post(JOBS, {**data, "post": "yes"} if confirm else data, follow=True)


def status(job) -> JobStatus:
    return JobStatus(Job.objects.values_list("status", flat=True).get(pk=job.pk))


@pytest.mark.p1
def test_cancel_selected_cancels_pending_asks_running_and_leaves_finished_jobs(staff):
    client = staff("view_job", "cancel_job")
    pending, running, dead = make_job(), running_job(), dead_job()
    confirm = cancel(client, [pending, running, dead], confirm=False)
    assert "Cancel 2 jobs?" in confirm.content.decode()  # the dead one is not counted: it is finished
    assert status(pending) == JobStatus.PENDING
    response = cancel(client, [pending, running, dead])
    assert response.status_code == 200
    assert [str(m) for m in response.context["messages"]] == [
        "Cancelled 1 pending job(s); asked 1 running job(s) to stop.",
        "1 job(s) left unchanged: not in a status this action changes, changed or locked at this moment, "
        "or (requeue) their dedupe key is held by another job.",
    ]
    assert (status(pending), status(running), status(dead)) == (
        JobStatus.CANCELLED, JobStatus.RUNNING, JobStatus.DEAD,
    )  # fmt: skip
    asked = Job.objects.get(pk=running.pk)
    assert asked.cancel_requested_at is not None and asked.cancelled_by == f"admin {client.user.username}"
    entry = LogEntry.objects.get(action_flag=CHANGE)  # one entry for the action
    ids = ", ".join(str(pk) for pk in sorted([pending.pk, running.pk]))
    assert entry.change_message == f"Cancelled: 2 of 2 job(s) (ids {ids}); list ?"


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


# -- a cancel asked of a running job, seen from the list and the job's page --------------------------------
def test_a_running_job_asked_to_stop_says_so_with_who_and_when(staff):
    client = staff("view_job", "cancel_job")
    asked_at = timezone.now() - dt.timedelta(minutes=3)
    asked = running_job(cancel_requested_at=asked_at, cancelled_by="admin oncall")
    plain = running_job()
    row = row_of(client.get(JOBS).content.decode(), asked)
    assert "cancel requested" in row and "admin oncall" in row and "3m00s ago" in row
    assert "cancel requested" not in row_of(client.get(JOBS).content.decode(), plain)
    page = client.get(f"{JOBS}{asked.pk}/change/").content.decode()
    status = readonly(page, "status_badge")
    assert "Running" in status and "cancel requested" in status
    cancel = readonly(page, "cancel_display")
    assert "by admin oncall" in cancel and asked_at.strftime("%Y-%m-%d %H:%M:%S UTC") in cancel
    assert 'id="jobq-cancel-job"' not in page  # asked already: nothing more a cancel would do


def readonly(page: str, field: str) -> str:
    """What a job's page shows for ``field``."""
    return re.search(rf'field-{field}">.*?<div class="readonly">(.*?)</div>', page, re.S).group(1)


def row_of(page: str, job: Job) -> str:
    """The job list's row of ``job``."""
    rows = re.findall(r"<tr>.*?</tr>", page, re.S)
    return next(row for row in rows if f'value="{job.pk}"' in row)


# -- the Cancel button of a job's page -----------------------------------------------------------------
@pytest.mark.p1
def test_a_jobs_page_offers_cancel_to_those_who_may_while_it_would_change_something(staff):
    allowed, viewer = staff("view_job", "cancel_job"), staff("view_job")
    pending, running = make_job(), running_job()
    waiting = make_job(status=JobStatus.WAITING, waiting_on=1)
    for job in (pending, running, waiting):
        page = allowed.get(f"{JOBS}{job.pk}/change/").content.decode()
        assert f'action="{JOBS}{job.pk}/cancel/"' in page and 'name="csrfmiddlewaretoken"' in page, job
        assert 'id="jobq-cancel-job"' not in viewer.get(f"{JOBS}{job.pk}/change/").content.decode()
    for job in (dead_job(), make_job(status=JobStatus.DONE, finished_at=timezone.now())):
        assert 'id="jobq-cancel-job"' not in allowed.get(f"{JOBS}{job.pk}/change/").content.decode()


@pytest.mark.p1
def test_the_cancel_button_cancels_that_job_and_logs_it(staff):
    client = staff("view_job", "cancel_job")
    pending, running = make_job(), running_job()
    response = client.post(f"{JOBS}{pending.pk}/cancel/", follow=True)
    assert response.redirect_chain[-1][0] == f"{JOBS}{pending.pk}/change/"
    assert [str(m) for m in response.context["messages"]] == [
        "Cancelled 1 pending job(s); asked 0 running job(s) to stop."
    ]
    response = client.post(f"{JOBS}{running.pk}/cancel/", follow=True)
    assert [str(m) for m in response.context["messages"]] == [
        "Cancelled 0 pending job(s); asked 1 running job(s) to stop."
    ]
    assert (status(pending), status(running)) == (JobStatus.CANCELLED, JobStatus.RUNNING)
    assert Job.objects.get(pk=running.pk).cancelled_by == f"admin {client.user.username}"
    logged = set(LogEntry.objects.filter(action_flag=CHANGE).values_list("object_id", "change_message"))
    assert logged == {(str(pending.pk), "Cancelled"), (str(running.pk), "Cancelled")}


@pytest.mark.p0
def test_the_cancel_button_takes_a_post_with_its_csrf_token_and_the_permission(staff):
    job = make_job()
    viewer = staff("view_job", csrf=True)
    viewer.get(f"{JOBS}{job.pk}/change/")
    token = viewer.cookies["csrftoken"].value
    assert viewer.post(f"{JOBS}{job.pk}/cancel/", {"csrfmiddlewaretoken": token}).status_code == 403
    client = staff("view_job", "cancel_job", csrf=True)
    assert client.get(f"{JOBS}{job.pk}/cancel/").status_code == 405
    assert client.post(f"{JOBS}{job.pk}/cancel/").status_code == 403  # no token
    assert client.post(f"{JOBS}{job.pk + 1000}/cancel/").status_code == 403
    assert status(job) == JobStatus.PENDING and not LogEntry.objects.exists()
    client.get(f"{JOBS}{job.pk}/change/")  # sets the CSRF cookie, as the page the button is on does
    token = client.cookies["csrftoken"].value
    assert client.post(f"{JOBS}{job.pk + 1000}/cancel/", {"csrfmiddlewaretoken": token}).status_code == 404
    response = client.post(f"{JOBS}{job.pk}/cancel/", {"csrfmiddlewaretoken": token})
    assert response.status_code == 302 and status(job) == JobStatus.CANCELLED


@pytest.mark.p1
@pytest.mark.django_db(transaction=True)
def test_a_job_cancelled_from_its_page_while_it_ran_reads_as_cancelled(staff, settings, worker_thread):
    """A real worker runs a task that waits for its cancel; the page's button asks it to stop. The run
    ends on django_jobq.outcomes.Cancelled, whose reason the worker stores as the last error: the
    list and the page give the cancel in words (by whom), the stored text folded under it."""
    settings.JOBQ = {**settings.JOBQ, "LEASE_SECONDS": 2, "HEARTBEAT_SECONDS": 0.2, "POLL_INTERVAL": 0.2}
    client = staff("view_job", "cancel_job")
    job_id = Job.objects.enqueue("test.until_cancelled", {"seconds": 60})
    worker_thread()
    wait_until(lambda: Job.objects.get(pk=job_id).status == JobStatus.RUNNING, message="the task started")
    client.post(f"{JOBS}{job_id}/cancel/")
    wait_until(lambda: Job.objects.get(pk=job_id).status == JobStatus.CANCELLED, message="the run ended")
    job = Job.objects.get(pk=job_id)
    assert job.last_error == f"job {job.id} was cancelled; the run stopped"  # as the worker stores it
    by = f"cancelled by admin {client.user.username}"
    row = row_of(client.get(JOBS).content.decode(), job)
    assert by in row and "outcomes.Cancelled" not in row
    page = client.get(f"{JOBS}{job_id}/change/").content.decode()
    assert re.search(rf'<p id="jobq-cancel-reason">{by}</p><details>', page)
    assert (
        f"job {job.id} was cancelled; the run stopped" in page.split('id="jobq-cancel-reason"')[1]
    )  # folded
