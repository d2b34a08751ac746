"""The admin: job list, filters, detail, dead letters, dashboard, and the guarded, logged actions."""

import datetime as dt
import itertools
import json

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobq import dashboard
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.sql.postgres import stats
from tests.conftest import explain, plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"
DASHBOARD = "/admin/django_jobq/job/dashboard/"


def traceback_of(exc: str, message: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/tasks.py", line 12, in send\n'
        "    deliver(order)\n"
        f"{exc}: {message}\n"
    )


def make_job(**fields) -> Job:
    values = {"task": "test.echo", "queue": "default", "payload": {"order": 1}, "max_attempts": 5, **fields}
    return Job.objects.create(**values)


def dead_job(
    task="test.echo", exc="ValueError", message="boom", queue="default", attempts=3, **fields
) -> Job:
    errors = [
        {
            "attempt": n,
            "at": f"2026-03-01T09:0{n}:00+00:00",
            "worker": f"w{n}",
            "error": traceback_of(exc, f"{message} #{n}"),
        }
        for n in range(1, attempts + 1)
    ]
    return make_job(
        task=task,
        queue=queue,
        status=JobStatus.DEAD,
        attempts=attempts,
        max_attempts=attempts,
        worker_id=f"w{attempts}",
        last_error=errors[-1]["error"],
        errors=errors,
        finished_at=timezone.now(),
        **fields,
    )


def running_job(**fields) -> Job:
    now = timezone.now()
    values = {
        "attempts": 1,
        "worker_id": "host-1:42",
        "started_at": now,
        "lease_until": now + dt.timedelta(seconds=30),
    }
    return make_job(**{**values, **fields, "status": JobStatus.RUNNING})


_users = itertools.count()


@pytest.fixture
def staff(django_user_model):
    """A logged-in client for a staff user holding exactly the given django_jobq permissions."""

    def make(*codenames: str) -> Client:
        user = django_user_model.objects.create_user(f"staff{next(_users)}", password="pw", is_staff=True)
        perms = Permission.objects.filter(content_type__app_label="django_jobq", codename__in=codenames)
        assert perms.count() == len(codenames), codenames
        user.user_permissions.set(perms)
        client = Client()
        client.force_login(user)
        client.user = user
        return client

    return make


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
    with django_assert_max_num_queries(6):
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
        with django_assert_max_num_queries(6):
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
    )
    make_job(task="shop.search")  # PENDING: not a dead letter
    with django_assert_max_num_queries(6):
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
    with django_assert_max_num_queries(6):
        response = admin_client.get(DEAD, {"task": "shop.search", "exception": "KeyError"})
    assert [job.pk for job in response.context["cl"].result_list] == [lookup.pk]
    response = admin_client.get(DEAD, {"exception": "lease expired"})
    assert [job.pk for job in response.context["cl"].result_list] == [reaped.pk]


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
    response = act(client, DEAD, "requeue_selected", jobs)
    assert "Requeued 2 dead job(s)." in messages_of(response)
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.PENDING and job.attempts == 0
        assert len(job.errors) == 3  # the error history stays
    entries = LogEntry.objects.filter(user=client.user).order_by("object_id")
    assert [(e.object_id, e.action_flag, e.change_message) for e in entries] == [
        (str(job.pk), CHANGE, "Requeued (DEAD -> PENDING)") for job in sorted(jobs, key=lambda j: j.pk)
    ]
    assert all(e.content_type.model_class() is Job for e in entries)


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
        act(client, DEAD, "requeue_selected", [now])
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
    response = act(admin_client, JOBS, "requeue_selected", [running, pending, done])
    assert messages_of(response) == [
        "3 job(s) left unchanged: only DEAD jobs are requeued, and not while another active job holds "
        "the same dedupe key."
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
    response = act(admin_client, DEAD, "requeue_selected", [dead])
    assert "1 job(s) left unchanged" in messages_of(response)[0]
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
            "apply": "1",
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
            "apply": "1",
            "run_at": "2030-01-02T03:04",
            "priority": "-5",
        },
        follow=True,
    )
    assert "Requeued 2 dead job(s)." in messages_of(response)
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.PENDING and job.priority == -5
        assert job.run_at == dt.datetime(2030, 1, 2, 3, 4, tzinfo=dt.UTC)
    messages = set(LogEntry.objects.values_list("change_message", flat=True))
    assert messages == {"Requeued (DEAD -> PENDING), to run at 2030-01-02T03:04:00+00:00, priority -5"}


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
    assert confirm.status_code == 200 and "Are you sure" in confirm.content.decode()
    assert Job.objects.count() == 3
    response = act(client, DEAD, "delete_selected", jobs, post="yes")
    assert response.status_code == 200
    assert list(Job.objects.values_list("pk", flat=True)) == [keep.pk]
    entries = LogEntry.objects.filter(user=client.user, action_flag=DELETION)
    assert sorted(e.object_id for e in entries) == sorted(str(j.pk) for j in jobs)
    assert all(e.object_repr.startswith(f"job {e.object_id} test.echo") for e in entries)


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
    assert (
        "1 job(s) were not deleted: they are running, being changed at this moment, or gone."
        in messages_of(response)
    )
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


# -- dashboard ---------------------------------------------------------------------------------------------
def _finished(queue: str, status: JobStatus, minutes_ago: float, count: int = 1) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, started_at, finished_at)
               SELECT 'test.echo', %s, '{}', %s, 100, now(), 1, 5, '[]', now(), now(),
                      now() - make_interval(secs => %s)
               FROM generate_series(1, %s)""",
            [queue, int(status), minutes_ago * 60, count],
        )


def _seed_dashboard() -> None:
    """Jobs in two queues; the rows written with the database's now() date from the test's transaction start,
    so these tests read the figures with the Python clock (python_clock), which is a little later."""
    make_job(queue="emails", run_at=timezone.now() - dt.timedelta(seconds=300))
    make_job(queue="emails", run_at=timezone.now() - dt.timedelta(seconds=30))
    make_job(queue="emails", run_at=timezone.now() + dt.timedelta(hours=1))  # scheduled, not due
    running_job(queue="emails")
    running_job(queue="default", lease_until=timezone.now() - dt.timedelta(seconds=5))  # expired lease
    dead_job(queue="default")
    _finished("emails", JobStatus.DONE, 2, count=4)
    _finished("emails", JobStatus.DONE, 30, count=6)
    _finished("default", JobStatus.DEAD, 3)
    _finished("default", JobStatus.DONE, 90, count=2)  # over an hour ago: only in the DONE total
    now = timezone.now()
    WorkerRecord.objects.create(
        worker_id="host-1:42", hostname="host-1", pid=42, lanes={"emails": 4}, running=1
    )
    WorkerRecord.objects.create(
        worker_id="host-2:7",
        hostname="host-2",
        pid=7,
        lanes={"default": 2},
        running=0,
        last_seen_at=now - dt.timedelta(minutes=2),
        stopped_at=now - dt.timedelta(minutes=2),
    )
    WorkerRecord.objects.create(
        worker_id="gone:1", hostname="gone", pid=1, lanes={}, last_seen_at=now - dt.timedelta(hours=2)
    )


@pytest.mark.p1
def test_dashboard_figures(python_clock):
    _seed_dashboard()
    snap = dashboard.snapshot()
    q = {figures.queue: figures for figures in snap.queues}
    assert set(q) == {"default", "emails"}
    emails, default = q["emails"], q["default"]
    assert (emails.pending, emails.due, emails.running, emails.expired, emails.dead) == (3, 2, 1, 0, 0)
    assert 299 <= emails.lag < 320
    assert (default.pending, default.due, default.lag, default.running, default.expired) == (0, 0, None, 1, 1)
    assert default.dead == 2  # the dead letter and the one that died 3 minutes ago
    assert (emails.done, emails.done_5m, emails.done_60m, emails.dead_5m, emails.dead_60m) == (
        10,
        4,
        10,
        0,
        0,
    )
    assert (default.done, default.done_5m, default.done_60m, default.dead_5m, default.dead_60m) == (
        2,
        0,
        0,
        2,
        2,
    )
    assert not snap.done_estimated
    assert (
        snap.total.due == 2
        and snap.total.dead == 2
        and snap.total.done == 12
        and snap.total.lag == emails.lag
    )
    assert len(snap.throughput) == 60 and [m.ago for m in snap.throughput] == list(range(59, -1, -1))
    by_ago = {m.ago: m for m in snap.throughput}
    assert by_ago[2].done == 4 and by_ago[30].done == 6 and by_ago[3].dead == 1 and by_ago[0].dead == 1
    assert sum(m.done for m in snap.throughput) == 10
    assert [(w.worker_id, w.state) for w in snap.workers] == [("host-1:42", "alive"), ("host-2:7", "stopped")]
    assert snap.workers[0].lanes == {"emails": 4}
    assert json.loads(json.dumps(snap.as_dict()))["total"]["due"] == 2


@pytest.mark.p1
def test_dashboard_page(admin_client, django_assert_max_num_queries, python_clock):
    _seed_dashboard()
    with django_assert_max_num_queries(8):  # the snapshot's 6 statements, the session, the user
        response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    page = response.content.decode()
    assert '<span class="jobq-figure" id="jobq-due">2</span>' in page
    assert '<span class="jobq-figure" id="jobq-expired">1</span>' in page
    assert '<span class="jobq-figure" id="jobq-done-60m">10</span>' in page
    assert (
        "<svg" in page
        and page.count('class="jobq-bar-done"') == 2
        and page.count('class="jobq-bar-dead"') == 2
    )
    assert "2 min ago: 4 done, 0 dead" in page
    assert "host-1:42" in page and "host-2:7" in page and "gone:1" not in page
    assert "<script" not in page.split('id="content-main"')[1]  # server-side HTML and SVG only
    assert (
        '<meta http-equiv="refresh" content="10">'
        in admin_client.get(DASHBOARD, {"refresh": 10}).content.decode()
    )
    assert "Queue dashboard" in admin_client.get("/admin/django_jobq/").content.decode()


@pytest.mark.p1
def test_dashboard_needs_the_view_permission(staff, client):
    assert staff("view_job").get(DASHBOARD).status_code == 200
    assert staff("requeue_job").get(DASHBOARD).status_code == 403
    assert client.get(DASHBOARD).status_code == 302  # to the login page


# -- a large table -----------------------------------------------------------------------------------------
ROWS = 200_000


def _seq_scans(plan: dict) -> list[str]:
    return [n.get("Relation Name", "?") for n in plan_nodes(plan) if n["Node Type"] == "Seq Scan"]


@pytest.mark.p1
def test_dashboard_queries_read_indexes_with_a_large_history(admin_client, django_assert_max_num_queries):
    """200,000 jobs, nearly all DONE: no figure reads the DONE history, and the page does not count it."""
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, started_at, finished_at, last_error, worker_id,
                                     lease_until)
               SELECT 'test.echo', (ARRAY['default', 'emails', 'reports'])[1 + i %% 3], '{}',
                      CASE WHEN i %% 1000 = 0 THEN 0 WHEN i %% 1000 = 1 THEN 1 WHEN i %% 1000 = 2 THEN 3 ELSE 2 END,
                      100, now() - make_interval(secs => i), 1, 5, '[]', now() - make_interval(secs => i),
                      now() - make_interval(secs => i),
                      CASE WHEN i %% 1000 NOT IN (0, 1) THEN now() - make_interval(secs => i) END,
                      CASE WHEN i %% 1000 = 2 THEN 'ValueError: boom' END,
                      CASE WHEN i %% 1000 = 1 THEN 'w1' END,
                      CASE WHEN i %% 1000 = 1 THEN now() + interval '30 seconds' END
               FROM generate_series(1, %s) AS i""",
            [ROWS],
        )
        cursor.execute("ANALYZE jobq_job")
    for name in ("ACTIVE", "FINISHED", "FILTER_NAMES", "WORKERS", "DONE_ESTIMATE"):
        plan = explain(getattr(stats, name), {"limit": 50, "recent": 600})
        assert "jobq_job" not in _seq_scans(plan), f"{name} scans jobq_job: {plan}"
    # The DONE count stops after EXACT_LIMIT + 1 rows, wherever it reads them from.
    plan = explain(stats.DONE_COUNT, {"limit": dashboard.EXACT_LIMIT + 1})
    limits = [n for n in plan_nodes(plan) if n["Node Type"] == "Limit"]
    assert limits and limits[0]["Plan Rows"] <= dashboard.EXACT_LIMIT + 1
    indexes = {n.get("Index Name") for n in plan_nodes(explain(stats.ACTIVE))}
    assert {"jobq_job_claim", "jobq_job_lease", "jobq_job_dead"} <= indexes
    assert "jobq_job_finished" in {n.get("Index Name") for n in plan_nodes(explain(stats.FINISHED))}
    assert "Seq Scan" not in dashboard.dead_letter_query().explain()

    snap = dashboard.snapshot()
    assert snap.done_estimated  # the DONE count comes from statistics, not from reading 199,400 rows
    done = ROWS - 3 * ROWS // 1000
    assert snap.total.done == pytest.approx(done, rel=0.05)
    assert (snap.total.pending, snap.total.running, snap.total.dead) == (200, 200, 200)  # counted exactly
    assert snap.total.done_60m == pytest.approx(3_600 * 997 / 1000, rel=0.01)
    assert dashboard.snapshot(exact=True).total.done == done

    with django_assert_max_num_queries(8):
        assert admin_client.get(DASHBOARD).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(JOBS)
    assert response.status_code == 200 and len(response.context["cl"].result_list) == 50
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in (q["sql"] or "").upper()]
    assert len(counts) == 1 and "LIMIT 10001" in counts[0]  # the list counts no more than 10,001 rows ...
    assert response.context["cl"].result_count == pytest.approx(ROWS, rel=0.05)  # ... and estimates the rest
    with django_assert_max_num_queries(6):
        assert admin_client.get(DEAD).status_code == 200
