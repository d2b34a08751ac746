"""``python -m bench.console``: the admin's pages with many jobs in the table.

``load N`` fills the database at DATABASE_URL (migrated, empty job table) with about N jobs shaped as a
busy week: 95.6 % DONE over the last 7 days in 20 queues and 50 tasks, with a DEAD job every 251st and a
CANCELLED one every 1009th among them, then 2,000 RUNNING and 200,000 PENDING per 5.2 million. ``measure``
gets each admin page (Django's test client, as a superuser) RUNS times and prints the median in ms.

    DATABASE_URL=postgres://…/jobq_big python manage.py migrate --settings tests.settings
    DATABASE_URL=postgres://…/jobq_big python -m bench.console load 5200000
    DATABASE_URL=postgres://…/jobq_big python -m bench.console measure
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

SCALE = 5_227_000  # the shape's job count: 5,025,000 history + 2,000 RUNNING + 200,000 PENDING

# One INSERT per part, ids in time order: the history first (oldest), then RUNNING, then PENDING.
# DEAD and CANCELLED jobs are scattered through the history as they would be.
_HISTORY = """
INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts, fence,
    releases, snoozes, error_count, worker_id, dedupe_key, key_released, awaited, result, last_error,
    errors, waiting_on, has_dependents, created_at, started_at, finished_at)
SELECT 'bench.t' || (i %% 50), 'q' || (i %% 20),
    jsonb_build_object('order_id', i, 'tenant', i %% 1000),
    CASE WHEN i %% 251 = 0 THEN 3 WHEN i %% 1009 = 0 THEN 4 ELSE 2 END, 100, at, 1, 3, 1, 0, 0,
    CASE WHEN i %% 251 = 0 THEN 3 ELSE 0 END, 'w' || (i %% 16),
    CASE WHEN i %% 100 = 0 THEN 'key-' || i END, false, false,
    CASE WHEN i %% 251 <> 0 AND i %% 1009 <> 0 THEN '{"ok": true}'::jsonb END,
    CASE WHEN i %% 251 = 0 THEN E'Traceback (most recent call last):\\n  File "t.py", line 1, in run\\n'
        || (ARRAY['ValueError', 'KeyError', 'smtplib.SMTPServerDisconnected', 'TimeoutError',
                  'shop.errors.PaymentDeclined'])[1 + i %% 5] || ': boom ' || i
         WHEN i %% 1009 = 0 THEN 'cancelled by admin bench' END,
    '[]'::jsonb, 0, false, at, at, at + interval '2 seconds'
FROM (SELECT i, now() - interval '7 days' + (i * (interval '7 days' / %(history)s)) AS at
      FROM generate_series(1, %(history)s) AS i) AS s
"""
_ACTIVE = """
INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts, fence,
    releases, snoozes, error_count, worker_id, lease_until, key_released, awaited, errors, waiting_on,
    has_dependents, created_at, started_at)
SELECT 'bench.t' || (i %% 50), 'q' || (i %% 20), jsonb_build_object('order_id', i, 'tenant', i %% 1000),
    %(status)s, 100, now() - interval '1 minute' + i * interval '1 millisecond', %(attempts)s, 3, 1, 0, 0,
    0, CASE WHEN %(status)s = 1 THEN 'w' || (i %% 16) END,
    CASE WHEN %(status)s = 1 THEN now() + interval '1 hour' END, false, false, '[]'::jsonb, 0, false,
    now() - interval '1 minute', CASE WHEN %(status)s = 1 THEN now() END
FROM generate_series(1, %(count)s) AS i
"""


def load(cursor: Any, jobs: int) -> dict[str, int]:
    """Insert about ``jobs`` jobs in the week's shape (see the module's docstring); VACUUM ANALYZE."""
    scale = jobs / SCALE
    running, pending = max(1, round(2_000 * scale)), max(1, round(200_000 * scale))
    history = max(1, jobs - running - pending)
    cursor.execute(_HISTORY, {"history": history})
    cursor.execute(_ACTIVE, {"status": 1, "attempts": 1, "count": running})
    cursor.execute(_ACTIVE, {"status": 0, "attempts": 0, "count": pending})
    return {"history": history, "running": running, "pending": pending}


def pages(job_id: int, last_page: int) -> dict[str, str]:
    """Each page measured: its name and address."""
    jobs, dead = "/admin/django_jobq/job/", "/admin/django_jobq/deadjob/"
    return {
        "job list": jobs,
        "status=PENDING": f"{jobs}?status__exact=0",
        "status=RUNNING": f"{jobs}?status__exact=1",
        "status=DONE": f"{jobs}?status__exact=2",
        "status=DEAD": f"{jobs}?status__exact=3",
        "status=CANCELLED": f"{jobs}?status__exact=4",
        "queue=q7": f"{jobs}?queue=q7",
        "task=bench.t7": f"{jobs}?task=bench.t7",
        "PENDING by run at": f"{jobs}?status__exact=0&o=5",
        "DEAD by run at": f"{jobs}?status__exact=3&o=5",
        "DONE by finished at": f"{jobs}?status__exact=2&o=-6",
        "sorted by run at (all)": f"{jobs}?o=5",
        "sorted by status (all)": f"{jobs}?o=4",
        "search id": f"{jobs}?q={job_id}",
        "search task prefix": f"{jobs}?q=bench.t7",
        "search key:": f"{jobs}?q=key:key-1000",
        "search queue:": f"{jobs}?q=queue:q7",
        "payload in DEAD": f'{jobs}?status__exact=3&q={{"order_id": 2510}}',
        "payload in PENDING": f'{jobs}?status__exact=0&q={{"tenant": 42}}',
        "payload, all": f'{jobs}?q={{"order_id": 2510}}',
        "page 200": f"{jobs}?p=199",
        "last page": f"{jobs}?p={last_page}",
        "dead letters": dead,
        "dead by exception": f"{dead}?exception=KeyError",
    }


def other_pages(job_id: int) -> dict[str, str]:
    """The console's pages besides the lists of jobs (their statements are the engine's own)."""
    return {
        "dashboard": "/admin/django_jobq/job/dashboard/",
        "job page": f"/admin/django_jobq/job/{job_id}/change/",
        "workers": "/admin/django_jobq/workerrecord/",
        "workflows": "/admin/django_jobq/workflow/",
        "schedules": "/admin/django_jobq/schedule/",
        "bulk actions": "/admin/django_jobq/bulkaction/",
    }


def measure(runs: int, only: list[str]) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from django_jobq.models import Job

    setup_test_environment()
    user, _ = get_user_model().objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    newest = Job.objects.order_by("-id").values_list("id", flat=True).first() or 1
    with connection.cursor() as cursor:  # the planner's row count: the list's estimated total
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'jobq_job'")
        (rows,) = cursor.fetchone()
    last = max(1, rows // 50 - 5)
    for name, url in {**pages(newest - 1000, last), **other_pages(newest - 1000)}.items():
        if only and name not in only:
            continue
        times, status = [], 0
        for _ in range(runs):
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
            status = response.status_code
        print(f"{name:28} {statistics.median(times):8.0f} ms  ({status})", flush=True)
    connection.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("load").add_argument("jobs", type=int)
    m = sub.add_parser("measure")
    m.add_argument("--runs", type=int, default=5)
    m.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.db import connection

    if args.command == "load":
        with connection.cursor() as cursor:
            print(load(cursor, args.jobs))
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE jobq_job")
        return 0
    measure(args.runs, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
