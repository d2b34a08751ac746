"""The admin: job list, filters, detail, dead letters, and the guarded, logged actions (the dashboard:
test_dashboard.py)."""

import datetime as dt
import json
import re

import pytest
import time_machine
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.sql.postgres import stats
from tests.integration.conftest import dead_job, make_job, running_job

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"


def act(client: Client, url: str, action: str, jobs, **data):
    """Post an admin action for ``jobs`` from the list at ``url``; follows the redirect."""
    payload = {"action": action, "index": "0", "_selected_action": [str(job.pk) for job in jobs], **data}
    return client.post(url, payload, follow=True)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def status_of(job: Job) -> JobStatus:
    return JobStatus(Job.objects.values_list("status", flat=True).get(pk=job.pk))


# -- list, filters, search ---------------------------------------------------------------------------------
@pytest.mark.p1
def test_job_list_shows_each_column_in_bounded_queries(admin_client, django_assert_max_num_queries):
    for i in range(60):
        make_job(payload={"i": i})
    dead = dead_job(task="test.flaky")
    running = running_job(task="test.progress", progress={"done": 30, "total": 120})
    with django_assert_max_num_queries(9):
        response = admin_client.get(JOBS)
    assert response.status_code == 200
    page = response.content.decode()
    assert "test.flaky" in page and "3/3" in page  # task, attempts/max
    assert "ValueError: boom #3" in page  # the exception line of the last error
    # compact in the list: the bar and its percentage, the figures on hover
    assert (
        '<span title="30 / 120"><progress class="jobq-progress" value="30" max="120">25%</progress> 25%</span>'
        in page
    )
    assert "worker host-1:42" in page  # the worker, on hover of the status
    assert (
        'class="jobq-status jobq-dead">Dead<' in page and 'class="jobq-status jobq-running">Running<' in page
    )
    assert "Queue dashboard" in page and "Dead letters" in page
    assert str(dead.pk) in page and str(running.pk) in page
    assert response.context["cl"].result_count == 62


@pytest.mark.p1
def test_job_list_filters_by_status_queue_and_task(admin_client, django_assert_max_num_queries):
    dead = dead_job(task="test.flaky", queue="emails")
    pending = make_job(task="test.noop", queue="emails")
    other = make_job(task="test.echo", queue="default")

    def listed(query: str) -> set[int]:
        with django_assert_max_num_queries(9):
            response = admin_client.get(JOBS + query)
        assert response.status_code == 200
        return {job.pk for job in response.context["cl"].result_list}

    assert listed("?status__exact=3") == {dead.pk}
    assert listed("?queue=emails") == {dead.pk, pending.pk}
    assert listed("?task=test.noop") == {pending.pk}
    assert listed("?queue=emails&status__exact=0") == {pending.pk}
    assert listed("") == {dead.pk, pending.pk, other.pk}
    # The filter choices come from the live indexes and the task registry.
    page = admin_client.get(JOBS).content.decode()
    assert "?queue=emails" in page and "?task=test.flaky" in page


@pytest.mark.p1
def test_search_by_id_task_prefix_and_dedupe_key(admin_client):
    a = make_job(task="shop.send_email", dedupe_key="order-17")
    b = make_job(task="shop.search")
    c = make_job(task="test.echo")

    def found(term: str) -> set[int]:
        response = admin_client.get(JOBS, {"q": term})
        return {job.pk for job in response.context["cl"].result_list}

    assert found(str(c.pk)) == {c.pk}
    assert found("shop.") == {a.pk, b.pk}
    assert found("order-17") == {a.pk}
    assert found("nothing-like-it") == set()


def test_a_numeric_search_asks_for_the_id_alone(admin_client):
    """A number is a job id: "id = N" and nothing else, which the primary key answers (OR'ed with the
    task prefix and the dedupe key, it read the whole table; test_plans.py has the plans)."""
    job = make_job(task="shop.send_email", dedupe_key=None)
    make_job(task=f"{job.pk}.odd_task_name", dedupe_key=str(job.pk))  # names it otherwise: not found
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(JOBS, {"q": str(job.pk)})
    assert [j.pk for j in response.context["cl"].result_list] == [job.pk]
    statements = [q["sql"] or "" for q in queries]
    listing = [
        sql
        for sql in statements
        if 'FROM "jobq_job"' in sql and " WHERE " in sql and "DISTINCT" not in sql  # not the filters'
    ]
    assert len(listing) == 2, statements  # its page of jobs, and their count
    for sql in listing:
        where = sql.split(" WHERE ", 1)[1].split(" ORDER BY ")[0].split(" LIMIT ")[0]
        assert where == f'"jobq_job"."id" = {job.pk}', sql


# -- detail ------------------------------------------------------------------------------------------------
@pytest.mark.p1
def test_detail_shows_payload_result_error_history_and_lease_read_only(
    admin_client, django_assert_max_num_queries
):
    job = dead_job(payload={"order": 17, "items": ["a", "b"]}, result={"partial": True})
    with django_assert_max_num_queries(4):
        response = admin_client.get(f"{JOBS}{job.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    assert json.dumps({"items": ["a", "b"], "order": 17}, indent=2).replace('"', "&quot;") in page
    assert "&quot;partial&quot;: true" in page
    for n in (1, 2, 3):  # every attempt's traceback, newest first
        assert f"ValueError: boom #{n}" in page
        assert f"<td>w{n}</td>" in page
    assert page.index("boom #3") < page.index("boom #1")
    assert "Traceback (most recent call last):" in page
    assert 'name="task"' not in page and 'name="_save"' not in page  # nothing to edit or save
    assert "jobq-requeue-link" in page  # a DEAD job offers requeue to a user who may

    running = running_job(progress={"done": 5, "total": None})
    page = admin_client.get(f"{JOBS}{running.pk}/change/").content.decode()
    assert "host-1:42" in page and "expires in" in page  # lease owner and expiry
    assert '<progress class="jobq-progress">…</progress> 5 done' in page
    assert "jobq-requeue-link" not in page
    assert "deletelink" not in page  # no delete button for a RUNNING job


def section(page: str, name: str) -> int:
    """Where the section headed ``name`` starts on a job's page."""
    headings = re.findall(r"<h2[^>]*>([^<]+)</h2>", page)
    assert name in headings, (name, headings)
    return page.index(f">{name}</h2>")


def test_a_jobs_payload_has_its_own_section_before_its_timing(admin_client):
    """A DEAD or CANCELLED job's errors come right after its summary, then its payload (what it was
    given: half of why it failed), never under its timing and lease."""
    dead = dead_job()
    page = admin_client.get(f"{JOBS}{dead.pk}/change/").content.decode()
    assert page.index("ValueError: boom #3") < section(page, "Payload") < section(page, "Timing")
    assert section(page, "Timing") < section(page, "Lease")
    assert page.index("&quot;order&quot;: 1") < section(page, "Progress and result")
    cancelled = make_job(status=JobStatus.CANCELLED, finished_at=timezone.now(), last_error="Discarded: gone")
    page = admin_client.get(f"{JOBS}{cancelled.pk}/change/").content.decode()
    assert page.index("Discarded: gone") < section(page, "Payload") < section(page, "Timing")
    done = make_job(status=JobStatus.DONE, finished_at=timezone.now(), last_error="an earlier attempt failed")
    page = admin_client.get(f"{JOBS}{done.pk}/change/").content.decode()
    # a DONE job keeps the usual order: what it was given, what it did, when, and only then errors
    assert section(page, "Payload") < section(page, "Timing") < page.index("an earlier attempt failed")


@pytest.mark.parametrize(
    ("ran", "shown"),
    [(dt.timedelta(milliseconds=12), "12ms"), (dt.timedelta(milliseconds=400), "400ms"),
     (dt.timedelta(seconds=4, milliseconds=260), "4.3s"), (dt.timedelta(seconds=425), "7m05s")],
)  # fmt: skip
def test_a_short_runs_duration_keeps_its_milliseconds(admin_client, ran, shown):
    start = timezone.now() - dt.timedelta(minutes=1)
    job = make_job(status=JobStatus.DONE, attempts=1, started_at=start, finished_at=start + ran)
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert re.search(r'field-duration">.*?<div class="readonly">([^<]*)</div>', page, re.S).group(1) == shown


def test_a_running_jobs_page_says_when_its_workers_heartbeat_is_overdue(admin_client, settings):
    settings.JOBQ = {**settings.JOBQ, "HEARTBEAT_SECONDS": 5}
    now = timezone.now()
    # the pages read the clock as this test set the heartbeats, however slowly they render
    with time_machine.travel(now, tick=False):
        WorkerRecord.objects.create(worker_id="host-1:42", hostname="host-1", pid=42, lanes={"default": 1},
                                    last_seen_at=now - dt.timedelta(seconds=2))  # fmt: skip
        WorkerRecord.objects.create(worker_id="host-2:7", hostname="host-2", pid=7, lanes={"default": 1},
                                    last_seen_at=now - dt.timedelta(seconds=47))  # fmt: skip
        beating = running_job()
        killed = running_job(worker_id="host-2:7")
        page = admin_client.get(f"{JOBS}{beating.pk}/change/").content.decode()
        assert "alive, last beat 2s ago" in page and "overdue" not in page
        page = admin_client.get(f"{JOBS}{killed.pk}/change/").content.decode()
        assert "overdue: last beat 47s ago (9 beats missed)" in page
        unknown = running_job(worker_id="host-3:1")
        assert "no heartbeat recorded" in admin_client.get(f"{JOBS}{unknown.pk}/change/").content.decode()

        workers = admin_client.get("/admin/django_jobq/workerrecord/").content.decode()
        assert "alive, last beat 2s ago" in workers and "overdue: last beat 47s ago" in workers


@pytest.mark.p0
def test_jobs_cannot_be_added_or_edited_through_the_admin(admin_client):
    job = running_job()
    assert admin_client.get(f"{JOBS}add/").status_code == 403
    response = admin_client.post(f"{JOBS}{job.pk}/change/", {"status": "0", "worker_id": ""})
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.worker_id == "host-1:42"
    assert admin_client.get(f"{JOBS}{job.pk}/delete/").status_code == 403


# -- dead letters ------------------------------------------------------------------------------------------
@pytest.mark.p1
def test_dead_letters_are_grouped_by_task_and_exception(admin_client, django_assert_max_num_queries):
    for _ in range(3):
        dead_job(task="shop.send_email", exc="smtplib.SMTPServerDisconnected", message="gone")
    dead_job(task="shop.send_email", exc="ValueError")
    lookup = dead_job(task="shop.search", exc="KeyError", message="'q'")
    reaped = make_job(
        task="shop.search",
        status=JobStatus.DEAD,
        finished_at=timezone.now(),
        last_error="lease expired: worker w9 stopped renewing it",
        exception="lease expired",
    )
    make_job(task="shop.search")  # PENDING: not a dead letter
    with django_assert_max_num_queries(9):
        response = admin_client.get(DEAD)
    assert response.status_code == 200
    groups = [(g.task, g.exception, g.jobs) for g in response.context["jobq_groups"]]
    assert groups == [
        ("shop.send_email", "smtplib.SMTPServerDisconnected", 3),
        ("shop.search", "KeyError", 1),
        ("shop.search", "lease expired", 1),
        ("shop.send_email", "ValueError", 1),
    ]
    assert response.context["cl"].result_count == 6
    with django_assert_max_num_queries(9):
        response = admin_client.get(DEAD, {"task": "shop.search", "exception": "KeyError"})
    assert [job.pk for job in response.context["cl"].result_list] == [lookup.pk]
    response = admin_client.get(DEAD, {"exception": "lease expired"})
    assert [job.pk for job in response.context["cl"].result_list] == [reaped.pk]


def test_the_dead_letters_page_links_elsewhere_and_filters_on_what_is_dead(admin_client):
    """Its buttons lead to the dashboard and every job (not to itself); its task and queue filters list
    the names that have dead letters, not every registered task or busy queue."""
    dead_job(task="shop.send_email", queue="emails")
    dead_job(task="shop.search", queue="interactive")
    make_job(task="shop.export", queue="reports")  # PENDING: not a dead letter
    response = admin_client.get(DEAD)
    page = response.content.decode()
    tools = page.split('<ul class="object-tools">', 1)[1].split("</ul>", 1)[0]
    assert re.findall(r'<a href="([^"]+)"', tools) == ["/admin/django_jobq/job/dashboard/", JOBS]
    filters = {f.title: [c["display"] for c in f.choices(response.context["cl"])][1:] for f in
               response.context["cl"].filter_specs}  # fmt: skip
    assert filters["task"] == ["shop.search", "shop.send_email"]
    assert filters["queue"] == ["emails", "interactive"]
    assert "test.echo" not in filters["task"]  # registered, and no dead letters


@pytest.mark.p1
def test_dead_letters_follow_the_job_permissions(staff):
    dead_job()
    assert staff("view_job").get(DEAD).status_code == 200
    assert staff().get(DEAD).status_code == 403
    index = staff("view_job").get("/admin/").content.decode()
    assert "Dead letters" in index and DEAD in index


# -- requeue -----------------------------------------------------------------------------------------------
@pytest.mark.p0
def test_requeue_action_with_permission_requeues_and_logs(staff):
    client = staff("view_job", "requeue_job")
    jobs = [dead_job(), dead_job(exc="KeyError")]
    confirm = act(client, DEAD, "requeue_selected", jobs)
    assert confirm.status_code == 200 and "Requeue 2 jobs?" in confirm.content.decode()
    assert all(status_of(job) == JobStatus.DEAD for job in jobs)  # nothing before the confirmation
    response = act(client, DEAD, "requeue_selected", jobs, post="yes")
    assert "Requeued 2 job(s)." in messages_of(response)
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.PENDING and job.attempts == 0
        assert len(job.errors) == 3  # the error history stays
    entry = LogEntry.objects.get(user=client.user)  # one entry for the action, not one per job
    ids = ", ".join(str(job.pk) for job in sorted(jobs, key=lambda j: j.pk))
    assert (entry.object_id, entry.action_flag) == (None, CHANGE)
    assert entry.change_message == f"Requeued (-> PENDING): 2 of 2 job(s) (ids {ids}); list ?"
    assert entry.content_type.model_class() is Job


@pytest.mark.p1
@pytest.mark.django_db(transaction=True)
def test_a_requeued_job_wakes_a_waiting_worker(staff, a_worker_waits):
    """A dead job requeued to run now used to send no NOTIFY: a worker asleep waiting for work found it
    only at its next poll. The requeue now notifies its queue as an enqueue does; one requeued to run
    later wakes nobody (no worker could claim it yet)."""
    import psycopg

    from django_jobq.notify.listener import connection_params

    client = staff("view_job", "requeue_job")
    now, later = dead_job(queue="now"), dead_job(queue="later")
    with psycopg.connect(**connection_params("default"), autocommit=True) as listen:
        listen.execute("LISTEN jobq")
        act(client, DEAD, "requeue_selected", [now], post="yes")
        assert [n.payload for n in listen.notifies(timeout=0.5)] == ["now"]
        assert Job.objects.requeue(later.pk, run_at=timezone.now() + dt.timedelta(hours=1))
        assert [n.payload for n in listen.notifies(timeout=0.5)] == []
    assert status_of(now) == status_of(later) == JobStatus.PENDING


@pytest.mark.p0
def test_requeue_without_permission_is_refused(staff):
    client = staff("view_job", "delete_job")
    job = dead_job()
    page = client.get(DEAD).content.decode()
    assert "requeue_selected" not in page and "requeue_with_options" not in page
    response = act(client, DEAD, "requeue_selected", [job])
    assert "No action selected." in messages_of(response)
    assert status_of(job) == JobStatus.DEAD
    assert client.get(f"{DEAD}{job.pk}/requeue/").status_code == 403
    assert client.post(f"{DEAD}{job.pk}/requeue/", {"apply": "1"}).status_code == 403
    assert status_of(job) == JobStatus.DEAD
    assert not LogEntry.objects.exists()
    assert "jobq-requeue-link" not in client.get(f"{JOBS}{job.pk}/change/").content.decode()


@pytest.mark.p0
def test_requeue_of_a_job_that_is_not_dead_changes_nothing(admin_client):
    running = running_job()
    pending = make_job(run_at=timezone.now() + dt.timedelta(hours=1))
    done = make_job(status=JobStatus.DONE, attempts=1, result=1, finished_at=timezone.now())
    before = {job.pk: Job.objects.filter(pk=job.pk).values().get() for job in (running, pending, done)}
    confirm = act(admin_client, JOBS, "requeue_selected", [running, pending, done])
    assert "Requeue 0 jobs?" in confirm.content.decode()
    response = act(admin_client, JOBS, "requeue_selected", [running, pending, done], post="yes")
    assert messages_of(response) == [
        "Requeued 0 job(s).",
        "3 job(s) left unchanged: not in a status this action changes, changed or locked at this moment, "
        "or (requeue) their dedupe key is held by another job.",
    ]
    after = {job.pk: Job.objects.filter(pk=job.pk).values().get() for job in (running, pending, done)}
    assert after == before
    response = admin_client.post(f"{JOBS}{running.pk}/requeue/", {"apply": "1"}, follow=True)
    assert Job.objects.filter(pk=running.pk).values().get() == before[running.pk]
    assert not LogEntry.objects.exists()


@pytest.mark.p1
def test_requeue_refused_while_an_active_duplicate_holds_the_dedupe_key(admin_client):
    dead = dead_job(dedupe_key="invoice-9", key_released=True)  # its window ended, and
    make_job(dedupe_key="invoice-9")  # the key was enqueued again since: PENDING with the same key
    response = act(admin_client, DEAD, "requeue_selected", [dead], post="yes")
    assert "1 job(s) left unchanged" in messages_of(response)[1]
    assert status_of(dead) == JobStatus.DEAD


@pytest.mark.p1
def test_requeue_with_a_new_run_at_and_priority_through_the_intermediate_form(staff):
    client = staff("view_job", "requeue_job")
    jobs = [dead_job(priority=100), dead_job(priority=50)]
    form = act(client, DEAD, "requeue_with_options", jobs)
    assert form.status_code == 200 and 'name="run_at"' in form.content.decode()
    assert all(status_of(job) == JobStatus.DEAD for job in jobs)  # nothing yet
    bad = client.post(
        DEAD,
        {
            "action": "requeue_with_options",
            "_selected_action": [j.pk for j in jobs],
            "post": "yes",
            "priority": "99999",
        },
    )
    assert bad.status_code == 200 and "errorlist" in bad.content.decode()
    assert all(status_of(job) == JobStatus.DEAD for job in jobs)
    response = client.post(
        DEAD,
        {
            "action": "requeue_with_options",
            "_selected_action": [j.pk for j in jobs],
            "post": "yes",
            "run_at": "2030-01-02T03:04",
            "priority": "-5",
        },
        follow=True,
    )
    assert "Requeued 2 job(s)." in messages_of(response)
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.PENDING and job.priority == -5
        assert job.run_at == dt.datetime(2030, 1, 2, 3, 4, tzinfo=dt.UTC)
    assert LogEntry.objects.get().change_message.startswith("Requeued (-> PENDING): 2 of 2 job(s)")


@pytest.mark.p1
def test_requeue_one_job_from_its_page(staff):
    client = staff("view_job", "requeue_job")
    job = dead_job()
    page = client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert f"{JOBS}{job.pk}/requeue/" in page
    assert client.get(f"{DEAD}{job.pk}/requeue/").status_code == 200
    assert client.get(f"{DEAD}not-a-number/requeue/").status_code == 404
    assert client.get(f"{DEAD}{job.pk + 1000}/requeue/").status_code == 404
    response = client.post(f"{DEAD}{job.pk}/requeue/", {"priority": "7"}, follow=True)
    assert response.redirect_chain[-1][0] == f"{JOBS}{job.pk}/change/"
    assert "Requeued 1 dead job(s)." in messages_of(response)
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.priority == 7
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_id, entry.action_flag) == (client.user, str(job.pk), CHANGE)


# -- delete ------------------------------------------------------------------------------------------------
@pytest.mark.p0
def test_delete_dead_letters_with_permission_is_logged(staff):
    client = staff("view_job", "delete_job")
    jobs = [dead_job(), dead_job()]
    keep = dead_job()
    confirm = act(client, DEAD, "delete_selected", jobs)
    assert confirm.status_code == 200 and "Are you sure you want to delete <strong>2</strong> jobs?" in (
        confirm.content.decode()
    )
    assert Job.objects.count() == 3
    response = act(client, DEAD, "delete_selected", jobs, post="yes")
    assert response.status_code == 200
    assert list(Job.objects.values_list("pk", flat=True)) == [keep.pk]
    entry = LogEntry.objects.get(user=client.user, action_flag=DELETION)
    assert (entry.object_id, entry.object_repr) == (None, "2 jobs")
    assert entry.change_message.startswith("Deleted: 2 of 2 job(s) (ids ")


@pytest.mark.p0
def test_delete_without_permission_is_refused(staff):
    client = staff("view_job", "requeue_job")
    job = dead_job()
    assert "delete_selected" not in client.get(DEAD).content.decode()
    response = act(client, DEAD, "delete_selected", [job], post="yes")
    assert "No action selected." in messages_of(response)
    assert client.post(f"{DEAD}{job.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()
    assert not LogEntry.objects.exists()


@pytest.mark.p0
def test_delete_never_removes_a_running_job(admin_client):
    running = running_job()
    done = make_job(status=JobStatus.DONE, finished_at=timezone.now())
    response = act(admin_client, JOBS, "delete_selected", [running, done], post="yes")
    assert messages_of(response)[0] == "Deleted 1 job(s)."
    assert "1 job(s) left unchanged" in messages_of(response)[1]
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]
    assert list(LogEntry.objects.values_list("object_id", "action_flag")) == [(str(done.pk), DELETION)]
    # The statement itself refuses RUNNING, whatever statuses it is given.
    with connection.cursor() as cursor:
        cursor.execute(stats.DELETE_INACTIVE, {"ids": [running.pk], "statuses": [0, 1, 2, 3]})
        assert cursor.fetchall() == []
    assert status_of(running) == JobStatus.RUNNING


@pytest.mark.p1
def test_dead_letter_delete_leaves_jobs_that_were_requeued_meanwhile(admin_client):
    job = dead_job()
    confirm = act(admin_client, DEAD, "delete_selected", [job])
    assert confirm.status_code == 200
    assert Job.objects.requeue(job.pk)  # someone requeues it before the confirmation
    response = act(admin_client, DEAD, "delete_selected", [job], post="yes")
    assert status_of(job) == JobStatus.PENDING
    assert not LogEntry.objects.filter(action_flag=DELETION).exists()
    assert response.status_code == 200
