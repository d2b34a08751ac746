"""The dashboard: its figures (dashboard.snapshot), its admin page, and its statements on a large table."""

import datetime as dt
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobq import dashboard
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.sql.postgres import stats
from tests.conftest import explain, plan_nodes
from tests.integration.conftest import dead_job, make_job, running_job

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"
DASHBOARD = "/admin/django_jobq/job/dashboard/"


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
    _finished("emails", JobStatus.CANCELLED, 1, count=3)
    _finished("emails", JobStatus.CANCELLED, 20)
    running_job(queue="default", task="test.capped")
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
    assert (default.pending, default.due, default.lag, default.running, default.expired) == (0, 0, None, 2, 1)
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
    assert (emails.cancelled_5m, emails.cancelled_60m, snap.total.cancelled_60m) == (3, 4, 4)
    assert by_ago[1].cancelled == 3 and by_ago[20].cancelled == 1 and emails.done == 10  # not DONE


@pytest.mark.p1
def test_dashboard_shows_the_queues_and_tasks_limits(settings, admin_client):
    settings.JOBQ = {"QUEUES": {"emails": {"MAX_RUNNING": 4, "RATE_LIMIT": "3/10s", "MAX_DEPTH": 500}}}
    _seed_dashboard()
    Job.objects.take_seats("w1", "emails", cap=4, want=2)
    Job.objects.take_seats("w1", "task:test.capped", cap=2, want=1)
    snap = dashboard.snapshot()
    emails = next(q for q in snap.queues if q.queue == "emails")
    assert (emails.max_running, emails.seats, emails.max_depth, emails.rate_limit) == (4, 2, 500, "3/10s")
    limits = {t.task: t for t in snap.tasks}
    assert set(limits) >= {"test.capped", "test.capped_per_key", "test.rate_limited"}
    capped = limits["test.capped"]
    assert (capped.running, capped.seats, capped.max_running) == (1, 1, 2)
    assert limits["test.capped_per_key"].max_running_per_key == 1
    assert limits["test.capped_per_key"].seats is None  # a per-key cap has no seats
    assert limits["test.rate_limited"].rate_limit == "5/s" and limits["test.rate_limited"].running == 0
    page = admin_client.get(DASHBOARD).content.decode()
    assert "≤ 3/10s" in page and 'id="jobq-task-limits"' in page and "test.rate_limited" in page
    assert "(2 of 4 seats)" in page and "(1 of 2 seats)" in page
    assert 'id="jobq-cancelled-60m">3 / 4<' in page
    text = dashboard.format_table(snap)
    assert "rate limit: queue emails starts at most 3/10s" in text and "test.capped" in text
    assert "1 (1/2 seats)" in text


@pytest.mark.parametrize(
    ("rate", "text"),
    [((10, 1.0), "10/s"), ((100, 60.0), "100/m"), ((5, 3600.0), "5/h"), ((1000, 86400.0), "1000/d"),
     ((3, 10.0), "3/10s"), ((1, 90.0), "1/90s"), ((2, 0.5), "2/0.5s"), (None, None)],
)  # fmt: skip
def test_format_rate_spells_the_setting(rate, text):
    assert dashboard.format_rate(rate) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0, "0ms"), (0.012, "12ms"), (0.4, "400ms"), (0.9996, "1.0s"), (1.25, "1.2s"),
     (4.26, "4.3s"), (9.96, "10s"), (42.4, "42s"), (425, "7m05s"), (-3, "0ms")],
)  # fmt: skip
def test_format_duration_keeps_the_milliseconds_of_a_short_run(seconds, text):
    assert dashboard.format_duration(seconds) == text


@pytest.mark.p1
def test_dashboard_page(admin_client, django_assert_max_num_queries, python_clock):
    _seed_dashboard()
    # the snapshot's 8 statements (the seats held: the test app registers tasks with a max_running),
    # the unfinished workflows, the session, the user
    with django_assert_max_num_queries(11):
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
    statements = (
        "ACTIVE",
        "FINISHED",
        "FILTER_NAMES",
        "WORKERS",
        "DONE_ESTIMATE",
        "RUNNING_BY_TASK",
        "HEALTH",
        "WORKFLOWS",
    )
    for name in statements:  # the dashboard's, and the metrics collector's (ACTIVE, PAUSED, HEALTH)
        plan = explain(getattr(stats, name), {"limit": 50, "recent": 600, "alive": 30})
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

    with django_assert_max_num_queries(11):
        assert admin_client.get(DASHBOARD).status_code == 200
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(JOBS)
    assert response.status_code == 200 and len(response.context["cl"].result_list) == 50
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in (q["sql"] or "").upper()]
    assert len(counts) == 1 and "LIMIT 10001" in counts[0]  # the list counts no more than 10,001 rows ...
    assert response.context["cl"].result_count == pytest.approx(ROWS, rel=0.05)  # ... and estimates the rest
    with django_assert_max_num_queries(6):
        assert admin_client.get(DEAD).status_code == 200
