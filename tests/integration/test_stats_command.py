"""manage.py jobq_stats: the table, --json, --watch, and its exit status as a health check."""

import datetime as dt
import json
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError
from django.utils import timezone

from django_jobq import dashboard
from django_jobq.management.commands import jobq_stats
from django_jobq.models import Job, JobStatus, WorkerRecord
from tests.conftest import ROOT, child_env

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]


def seed() -> None:
    """Two due jobs in "emails" (the oldest waiting 10 minutes), one dead letter in "default"."""
    now = timezone.now()
    Job.objects.create(task="test.echo", queue="emails", run_at=now - dt.timedelta(minutes=10))
    Job.objects.create(task="test.echo", queue="emails", run_at=now - dt.timedelta(seconds=5))
    Job.objects.create(
        task="test.echo",
        queue="default",
        status=JobStatus.DEAD,
        attempts=5,
        finished_at=now,
        last_error="KeyError: 'x'",
    )
    WorkerRecord.objects.create(
        worker_id="host-1:42", hostname="host-1", pid=42, lanes={"emails": 4, "default": 2}
    )


def stats(*args: str) -> tuple[str, str, int]:
    """Run the command in-process: (stdout, stderr, exit status)."""
    out, err = StringIO(), StringIO()
    try:
        call_command("jobq_stats", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return out.getvalue(), err.getvalue(), exc.returncode
    return out.getvalue(), err.getvalue(), 0


@pytest.mark.p1
def test_table(python_clock):
    seed()
    out, err, status = stats()
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[1].split() == [
        "queue",
        "pending",
        "due",
        "lag",
        "running",
        "expired",
        "waiting",
        "dead",
        "done",
        "done",
        "5m",
        "done",
        "60m",
        "dead",
        "5m",
        "dead",
        "60m",
        "cancelled",
        "60m",
    ]
    assert lines[2].split() == ["default", "0", "0", "-", "0", "0", "0", "1", "0", "0", "0", "1", "1", "0"]
    assert lines[3].split()[:4] == ["emails", "2", "2", "10m00s"]
    assert lines[4].split()[:3] == ["(all)", "2", "2"]
    assert "host-1:42" in out and "alive" in out and "default:2,emails:4" in out


@pytest.mark.p1
def test_json(python_clock):
    seed()
    out, _, status = stats("--json", "--max-dead", "0")
    assert status == 1
    data = json.loads(out)
    assert data["problems"] == ["1 dead jobs > 0"]
    assert [q["queue"] for q in data["queues"]] == ["default", "emails"]
    assert data["total"]["due"] == 2 and data["total"]["dead"] == 1 and data["done_estimated"] is False
    assert 599 <= data["queues"][1]["lag"] < 620
    assert len(data["throughput"]) == 60 and data["workers"][0]["lanes"] == {"default": 2, "emails": 4}
    dt.datetime.fromisoformat(data["now"])


@pytest.mark.p0
@pytest.mark.parametrize(
    ("args", "crossed"),
    [
        (("--max-lag", "900"), None),
        (("--max-lag", "300"), "queue emails: lag 600s > 300s"),
        (("--max-due", "2"), None),
        (("--max-due", "1"), "queue emails: 2 due jobs > 1"),
        (("--max-dead", "1"), None),
        (("--max-dead", "0"), "1 dead jobs > 0"),
        (("--max-expired", "0"), None),
    ],
)
def test_thresholds_set_the_exit_status(python_clock, args, crossed):
    seed()
    out, err, status = stats(*args)
    assert "emails" in out
    if crossed is None:
        assert (status, err) == (0, "")
    else:
        assert status == 1
        assert err.splitlines() == [f"threshold crossed: {crossed}"]


@pytest.mark.p1
def test_watch_refreshes_until_interrupted(python_clock, monkeypatch):
    seed()
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(jobq_stats.time, "sleep", sleep)
    out, _, status = stats("--watch", "2.5", "--json", "--max-lag", "60")
    assert sleeps == [2.5, 2.5]
    assert [json.loads(line)["problems"] for line in out.splitlines()] == [
        ["queue emails: lag 600s > 60s"]
    ] * 2
    assert status == 1  # the last snapshot's verdict


@pytest.mark.p1
def test_unreadable_figures_exit_3(monkeypatch):
    def broken(**kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(dashboard, "snapshot", broken)
    out, err, status = stats()
    assert status == 3 and out == "" and err == ""  # the CommandError carries the message


@pytest.mark.p1
@pytest.mark.parametrize("args", [("--watch", "0"), ("--max-lag", "soon"), ("--max-dead", "-1")])
def test_bad_arguments_are_refused(args):
    with pytest.raises(CommandError, match="argument"):
        call_command("jobq_stats", *args)


@pytest.mark.p0
@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_exit_codes_of_the_real_command():
    """The process's own exit status, as a health check (cron, a container probe) sees it."""
    seed()

    def run(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "django", "jobq_stats", *args]
        return subprocess.run(command, env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)

    ok = run("--max-lag", "3600")
    assert ok.returncode == 0, ok.stderr
    assert "emails" in ok.stdout
    crossed = run("--max-lag", "60")
    assert crossed.returncode == 1
    assert "threshold crossed: queue emails: lag" in crossed.stderr
    assert run("--watch", "0").returncode == 2
    unreadable = subprocess.run(
        [sys.executable, "-m", "django", "jobq_stats"],
        env=child_env(DATABASE_URL="postgres://postgres@127.0.0.1:1/none"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreadable.returncode == 3, unreadable.stderr
    assert "cannot read the queue's figures" in unreadable.stderr


def test_a_worker_whose_lane_is_all_stuck_shows_as_stuck():
    WorkerRecord.objects.create(
        worker_id="wedged:9", hostname="wedged", pid=9, lanes={"default": 2, "emails": 1},
        stuck={"default": 2}, running=2,
    )  # fmt: skip
    WorkerRecord.objects.create(
        worker_id="half:8", hostname="half", pid=8, lanes={"default": 2}, stuck={"default": 1}, running=2
    )
    states = {w.worker_id: w.state for w in dashboard.snapshot().workers}
    assert states == {"wedged:9": "stuck", "half:8": "alive"}
    out = StringIO()
    call_command("jobq_stats", stdout=out)
    assert "default:2(2 stuck)" in out.getvalue()


def test_a_supervisors_processes_are_listed_together_with_what_it_last_told_them(admin_client):
    def state(started: int, restarts: int, last_exit: str | None) -> dict:
        return {
            "id": "web-1:7", "host": "web-1", "pid": 7, "started_at": "2026-12-03T09:00:00+00:00",
            "processes": 2, "started": started, "restarts": restarts, "recycled": 0, "last_exit": last_exit,
        }  # fmt: skip

    now = timezone.now()
    WorkerRecord.objects.create(
        worker_id="web-1:7/1", hostname="web-1", pid=11, lanes={"default": 4},
        started_at=now - dt.timedelta(minutes=5), supervisor=state(2, 0, None),
    )  # fmt: skip
    WorkerRecord.objects.create(
        worker_id="web-1:7/3", hostname="web-1", pid=13, lanes={"default": 4},
        supervisor=state(3, 1, "web-1:7/2 killed by SIGKILL after 40.0s (crash)"),
    )  # fmt: skip
    WorkerRecord.objects.create(worker_id="alone:5", hostname="alone", pid=5, lanes={"default": 1})
    WorkerRecord.objects.create(  # a forged record: shown as a worker, its "supervisor" ignored
        worker_id="odd:6", hostname="odd", pid=6, lanes={}, supervisor={"id": "x", "pid": "not a pid"}
    )
    out = StringIO()
    call_command("jobq_stats", stdout=out)
    lines = out.getvalue().splitlines()
    order = [line.split()[0] for line in lines if line.startswith(("web-1", "alone", "odd"))]
    assert order[-2:] == ["web-1:7/3", "web-1:7/1"]  # together, after the others
    # the newest process's telling: the restart and what ended
    assert lines[-1] == (
        "supervisor web-1:7: pid 7 on web-1, since 2026-12-03T09:00:00+00:00; 2 process(es), 3 started, "
        "1 unplanned exit(s), 0 recycled; last exit: web-1:7/2 killed by SIGKILL after 40.0s (crash)"
    )
    out = StringIO()
    call_command("jobq_stats", "--json", stdout=out)
    workers = {w["worker_id"]: w["supervisor"] for w in json.loads(out.getvalue())["workers"]}
    assert workers["web-1:7/3"]["restarts"] == 1 and workers["alone:5"] is None and workers["odd:6"] is None
    page = admin_client.get("/admin/django_jobq/workerrecord/?supervisor=web-1%3A7").content.decode()
    assert "web-1:7/1" in page and "web-1:7/3" in page and "alone:5" not in page
    assert "last exit: web-1:7/2 killed by SIGKILL after 40.0s (crash)" in page  # its tooltip


@pytest.mark.django_db(transaction=True)
def test_stats_show_depth_against_its_limit_and_a_capped_queues_seats_held(settings):
    from django.core.management import call_command

    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_DEPTH": 100, "MAX_RUNNING": 4}}}
    Job.objects.enqueue("test.noop", queue="capped")
    Job.objects.enqueue("test.noop", queue="capped")
    Job.objects.claim("w1", queues=["capped"])
    Job.objects.take_seats("w1", "capped", cap=4, want=3)
    out = StringIO()
    call_command("jobq_stats", stdout=out)
    line = next(line for line in out.getvalue().splitlines() if line.startswith("capped"))
    assert "1/100" in line and "1 (3/4 seats)" in line
    out = StringIO()
    call_command("jobq_stats", "--json", stdout=out)
    queue = next(q for q in json.loads(out.getvalue())["queues"] if q["queue"] == "capped")
    assert (queue["pending"], queue["max_depth"], queue["running"], queue["max_running"]) == (1, 100, 1, 4)
    assert queue["seats"] == 3


@pytest.mark.django_db(transaction=True)
def test_the_job_tables_size_dead_rows_and_last_vacuum():
    """The upkeep line: what vacuum has to do, and when it last did it (PostgreSQL's statistics)."""
    from django.db import connection

    if connection.pg_version < 150000:
        pytest.skip("pg_stat_force_next_flush() is PostgreSQL 15+")

    def flushed_stats() -> dict:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        out, _, _ = stats("--json")
        return json.loads(out)["table"]

    with connection.cursor() as cursor:
        cursor.execute("VACUUM jobq_job")
    ids = [Job.objects.enqueue("test.echo") for _ in range(200)]
    Job.objects.filter(id__in=ids).update(priority=5)  # 200 dead row versions
    before = flushed_stats()
    assert before["dead_rows"] >= 200 and before["live_rows"] >= 200
    assert before["table_bytes"] > 0 and before["index_bytes"] > 0 and before["vacuumed_at"] is not None
    text, _, _ = stats()
    assert "table jobq_job: " in text and " dead (" in text and "last vacuum " in text

    vacuumed_before = dt.datetime.fromisoformat(before["vacuumed_at"])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM jobq_job")
    after = flushed_stats()
    assert after["dead_rows"] < before["dead_rows"]
    assert dt.datetime.fromisoformat(after["vacuumed_at"]) >= vacuumed_before


def test_the_upkeep_line_says_when_autovacuum_never_vacuums_the_job_table():
    """A server with autovacuum off, or a table opted out of it: nothing removes the dead rows, so the
    table line says so and the JSON has "autovacuum": false. The opt-out is this test's transaction's
    own, rolled back after it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        server_on = cursor.fetchone()[0] == "on"
    out, _, _ = stats("--json")
    assert json.loads(out)["table"]["autovacuum"] is server_on
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE jobq_job SET (autovacuum_enabled = false)")
    out, _, _ = stats("--json")
    assert json.loads(out)["table"]["autovacuum"] is False
    text, _, _ = stats()
    assert "AUTOVACUUM OFF: nothing removes its dead rows" in text
    assert Job.objects.autovacuum_on() is False
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE jobq_job RESET (autovacuum_enabled)")
    assert Job.objects.autovacuum_on() is server_on


@pytest.mark.django_db(transaction=True)
def test_a_transaction_left_open_is_named_and_crosses_max_xact_age():
    """Another session's open transaction holds back vacuum: its age is in the JSON, and past
    --max-xact-age the command says so and exits 1. Once it ends the threshold is clear again."""
    import time

    import psycopg

    from django_jobq.notify.listener import connection_params

    with psycopg.connect(**connection_params("default")) as holder:
        holder.execute("SELECT txid_current()")  # an xid: vacuum's horizon stops here
        time.sleep(0.3)
        out, _, status = stats("--json", "--max-xact-age", "0.2")
        data = json.loads(out)
        assert status == jobq_stats.EXIT_CROSSED and data["table"]["oldest_xact_seconds"] >= 0.3
        assert any("holds back vacuum" in p for p in data["problems"]), data["problems"]
        holder.rollback()
    out, _, status = stats("--json", "--max-xact-age", "0.2")
    assert status == 0 and not any("holds back vacuum" in p for p in json.loads(out)["problems"])


def test_the_upkeep_line_names_a_transaction_open_a_minute_or_more():
    import dataclasses

    from django_jobq.dashboard.text import OLD_XACT_SECONDS, format_upkeep

    snap = dashboard.snapshot(upkeep=True)

    def line(oldest: float | None) -> str:
        return format_upkeep(
            dataclasses.replace(snap, table=dataclasses.replace(snap.table, oldest_xact_seconds=oldest))
        )

    assert "holds back vacuum" not in line(None) and "holds back vacuum" not in line(OLD_XACT_SECONDS - 1)
    assert line(312).endswith("; a transaction open 5m12s holds back vacuum")
