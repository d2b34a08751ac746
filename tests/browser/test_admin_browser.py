"""End to end in a real headless Chromium: log in, requeue a dead letter, see it PENDING; screenshot the dashboard.

Runs Debian's chromium (/usr/bin/chromium, or $CHROMIUM) through Playwright; skipped only when that
browser is not installed. The screenshot lands in tests/artifacts/dashboard.png.
"""

import datetime as dt
import os
from pathlib import Path

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import connection
from django.utils import timezone

from django_jobq.models import Job, JobStatus, WorkerRecord
from tests.conftest import ROOT

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.p1,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CHROMIUM)"
    ),
]

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/shop/tasks.py", line 41, in send_receipt\n'
    "    smtp.send_message(message)\n"
    "smtplib.SMTPServerDisconnected: Connection unexpectedly closed\n"
)


def seed() -> Job:
    """A small, lively queue: backlog, running jobs with progress, an hour of history, workers, dead letters."""
    now = timezone.now()
    with connection.cursor() as cursor:
        # An hour of finished jobs: a steady trickle with a burst, and a few failures.
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, started_at, finished_at)
               SELECT (ARRAY['shop.send_receipt', 'shop.search', 'shop.resize_image'])[1 + i % 3],
                      (ARRAY['emails', 'interactive', 'default'])[1 + i % 3], '{}',
                      CASE WHEN i % 97 = 0 THEN 3 ELSE 2 END, 100, now(), 1, 5, '[]', now(), now(),
                      now() - make_interval(secs => (i * 7919) % 3600 / (1 + (i % 4 = 0)::int))
               FROM generate_series(1, 2400) AS i"""
        )
    for i in range(14):
        Job.objects.create(
            task="shop.send_receipt",
            queue="emails",
            payload={"order": 100 + i},
            run_at=now - dt.timedelta(seconds=20 * i),
        )
    for i, done in enumerate((12, 55, 88)):
        Job.objects.create(
            task="shop.resize_image",
            queue="default",
            status=JobStatus.RUNNING,
            attempts=1,
            payload={"album": i},
            progress={"done": done, "total": 100},
            worker_id="web-2:311",
            started_at=now - dt.timedelta(seconds=40),
            lease_until=now + dt.timedelta(seconds=20),
        )
    errors = [
        {
            "attempt": n,
            "at": (now - dt.timedelta(minutes=9 - n)).isoformat(),
            "worker": "web-1:207",
            "error": TRACEBACK,
        }
        for n in (1, 2, 3)
    ]
    dead = [
        Job.objects.create(
            task="shop.send_receipt",
            queue="emails",
            status=JobStatus.DEAD,
            attempts=3,
            max_attempts=3,
            payload={"order": 90 + i},
            worker_id="web-1:207",
            last_error=TRACEBACK,
            errors=errors,
            started_at=now - dt.timedelta(minutes=2),
            finished_at=now - dt.timedelta(minutes=i + 1),
        )
        for i in range(3)
    ]
    Job.objects.create(
        task="shop.search",
        queue="interactive",
        status=JobStatus.DEAD,
        attempts=1,
        max_attempts=1,
        payload={"q": "lamp"},
        last_error="KeyError: 'lamp'",
        finished_at=now,
    )
    WorkerRecord.objects.create(
        worker_id="web-1:207", hostname="web-1", pid=207, lanes={"emails": 4, "interactive": 8}, running=0
    )
    WorkerRecord.objects.create(
        worker_id="web-2:311", hostname="web-2", pid=311, lanes={"default": 3}, running=3
    )
    return dead[0]


def test_requeue_a_dead_letter_in_a_real_browser(live_server, django_user_model, settings):
    settings.JOBQ = {**settings.JOBQ, "HEARTBEAT_SECONDS": 10}  # the seeded workers stay "alive" for 30 s
    django_user_model.objects.create_superuser("oncall", "oncall@example.com", "correct horse")
    job = seed()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    shot.unlink(missing_ok=True)

    # Playwright's sync API runs an event loop in this thread: the ORM is used only before and after it.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next=/admin/django_jobq/deadjob/")
            page.fill("#id_username", "oncall")
            page.fill("#id_password", "correct horse")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/django_jobq/deadjob/")
            assert "smtplib.SMTPServerDisconnected" in page.inner_text("#jobq-dead-groups")

            page.check(f"input[name=_selected_action][value='{job.pk}']")
            page.select_option("select[name=action]", "requeue_selected")
            page.click("button[name=index]")
            page.wait_for_selector(".messagelist")
            assert "Requeued 1 dead job(s)." in page.inner_text(".messagelist")
            assert page.locator(f"input[name=_selected_action][value='{job.pk}']").count() == 0

            page.goto(f"{live_server.url}/admin/django_jobq/job/{job.pk}/change/")
            assert page.inner_text(".field-status_badge .readonly").strip() == "Pending"
            assert "Connection unexpectedly closed" in page.inner_text(".field-error_history")

            page.goto(f"{live_server.url}/admin/django_jobq/job/dashboard/")
            page.wait_for_selector("svg.jobq-chart")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()

    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.attempts == 0
    entry = LogEntry.objects.get(object_id=str(job.pk))
    assert (entry.user.username, entry.action_flag) == ("oncall", CHANGE)
    assert shot.stat().st_size > 10_000
