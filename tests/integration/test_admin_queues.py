"""The dashboard's paused queues and its Pause / Resume buttons: guarded by django_jobq.pause_queue,
POST with CSRF only, logged; the dashboard data (snapshot) that shows them."""

import logging

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.test import Client

from django_jobq import dashboard
from django_jobq.models import Job, QueueState, WorkerRecord

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

DASHBOARD = "/admin/django_jobq/job/dashboard/"
QUEUE = "/admin/django_jobq/job/dashboard/queue/"


def queue_log():
    return LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(QueueState))


def test_the_dashboard_shows_which_queues_are_paused_and_offers_the_buttons(admin_client):
    Job.objects.enqueue("test.noop", queue="emails")
    Job.objects.enqueue("test.noop", queue="default")
    Job.objects.pause_queue("emails", by="alice")
    Job.objects.pause_queue("idle")  # no jobs at all: listed anyway, so that it can be resumed
    page = admin_client.get(DASHBOARD).content.decode()
    assert page.count('<span class="jobq-status jobq-paused" title="paused by ') == 2
    assert "paused by alice since " in page and "paused by api since " in page
    assert page.count('value="resume"') == 2 and page.count('value="pause"') == 2  # default + the form
    assert 'name="csrfmiddlewaretoken"' in page and f'action="{QUEUE}"' in page
    assert '<input type="hidden" name="queue" value="idle">' in page


def test_a_user_who_may_only_view_sees_the_state_but_no_buttons(staff):
    Job.objects.pause_queue("emails")
    page = staff("view_job").get(DASHBOARD).content.decode()
    assert "jobq-paused" in page
    assert 'value="resume"' not in page and 'value="pause"' not in page and 'id="jobq-pause-form"' not in page


def test_pause_and_resume_buttons_work_and_are_logged(admin_client, admin_user, caplog):
    Job.objects.enqueue("test.noop", queue="emails")
    with caplog.at_level(logging.INFO, logger="django_jobq"):
        response = admin_client.post(QUEUE, {"queue": "emails", "action": "pause"})
    assert response.status_code == 302 and response["Location"] == DASHBOARD
    assert Job.objects.paused_queues() == ["emails"]
    assert QueueState.objects.get(name="emails").changed_by == admin_user.get_username()
    assert f"queue emails paused by {admin_user.get_username()} (admin)" in caplog.text
    entry = queue_log().get()
    assert (entry.user, entry.object_id, entry.action_flag) == (admin_user, "emails", CHANGE)
    assert entry.change_message == "Queue paused"

    again = admin_client.post(QUEUE, {"queue": "emails", "action": "pause"}, follow=True)
    assert "Queue emails was already paused." in again.content.decode()
    assert queue_log().count() == 1  # nothing changed, nothing logged

    done = admin_client.post(QUEUE, {"queue": "emails", "action": "resume"}, follow=True)
    assert "Queue emails resumed." in done.content.decode()
    assert Job.objects.paused_queues() == []
    assert list(queue_log().order_by("id").values_list("change_message", flat=True)) == [
        "Queue paused",
        "Queue resumed",
    ]


def test_a_staff_user_with_the_permission_may_pause(staff):
    client = staff("view_job", "pause_queue")
    assert client.post(QUEUE, {"queue": "emails", "action": "pause"}).status_code == 302
    assert Job.objects.paused_queues() == ["emails"]
    assert queue_log().get().user == client.user
    assert 'value="resume"' in client.get(DASHBOARD).content.decode()


@pytest.mark.parametrize("perms", [(), ("view_job",), ("pause_queue",), ("view_job", "requeue_job")])
def test_without_the_permission_the_buttons_answer_403(staff, perms):
    Job.objects.pause_queue("paused-one")
    client = staff(*perms)
    assert client.post(QUEUE, {"queue": "emails", "action": "pause"}).status_code == 403
    assert client.post(QUEUE, {"queue": "paused-one", "action": "resume"}).status_code == 403
    assert Job.objects.paused_queues() == ["paused-one"]
    assert not queue_log().exists()


def test_an_anonymous_visitor_is_sent_to_the_login_page():
    response = Client().post(QUEUE, {"queue": "emails", "action": "pause"})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert Job.objects.paused_queues() == []


def test_the_buttons_take_a_post_with_its_csrf_token_only(staff):
    client = staff("view_job", "pause_queue", csrf=True)
    assert client.get(QUEUE, {"queue": "emails", "action": "pause"}).status_code == 405
    assert client.post(QUEUE, {"queue": "emails", "action": "pause"}).status_code == 403  # no token
    assert Job.objects.paused_queues() == []
    client.get(DASHBOARD)  # sets the CSRF cookie, as the page the buttons are on does
    token = client.cookies["csrftoken"].value
    response = client.post(QUEUE, {"queue": "emails", "action": "pause", "csrfmiddlewaretoken": token})
    assert response.status_code == 302 and Job.objects.paused_queues() == ["emails"]


@pytest.mark.parametrize("queue", ["*", "", " emails", "a\x00b", "x" * 201])
def test_a_bad_queue_name_is_refused_with_a_message(admin_client, queue):
    response = admin_client.post(QUEUE, {"queue": queue, "action": "pause"}, follow=True)
    assert "Not a queue name" in response.content.decode()
    assert not QueueState.objects.exists() and not queue_log().exists()


def test_an_unknown_action_is_a_bad_request(admin_client):
    assert admin_client.post(QUEUE, {"queue": "emails", "action": "drop"}).status_code == 400
    assert admin_client.post(QUEUE, {"queue": "emails"}).status_code == 400
    assert not QueueState.objects.exists()


def test_the_snapshot_lists_paused_queues_and_does_not_call_them_unserved():
    Job.objects.enqueue("test.noop", queue="emails")
    Job.objects.enqueue("test.noop", queue="reports")
    WorkerRecord.objects.create(worker_id="w:1", hostname="w", pid=1, lanes={"default": 2})
    Job.objects.pause_queue("emails", by="alice")
    Job.objects.pause_queue("idle")
    snap = dashboard.snapshot()
    assert [(p.queue, p.by) for p in snap.paused] == [("emails", "alice"), ("idle", "api")]
    assert {q.queue: q.paused for q in snap.queues} == {"emails": True, "idle": True, "reports": False}
    assert snap.total.paused is False
    assert snap.unserved == ("reports",)  # emails is due and unserved too, but paused on purpose
    data = snap.as_dict()
    assert data["paused"][0]["queue"] == "emails" and data["queues"][0]["paused"] is True
