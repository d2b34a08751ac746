"""End to end in a real headless Chromium: log in, requeue a dead letter, see it PENDING; find a tenant's
jobs by tag, cancel them and pause their queue from the dashboard; every admin page's layout at 1400 px
(styled breadcrumbs, headers that neither overlap nor clip, no horizontal scroll).

Runs Debian's chromium (/usr/bin/chromium, or $CHROMIUM) through Playwright; skipped only when that
browser is not installed. Screenshots land in tests/artifacts/django-<version>/ (one per page), run
the test under each supported Django to get each version's.
"""

import itertools
import os
from pathlib import Path

import django
import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import Client
from django.utils import timezone

from django_jobq.models import Job, JobStatus, Schedule, ScheduleSource, WorkerRecord
from tests.browser.admin_seed import TRACEBACK, seed, seed_workflow
from tests.conftest import ROOT, wait_until

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = ROOT / "tests" / "artifacts"
VERSION_ARTIFACTS = ARTIFACTS / f"django-{django.get_version()}"
WIDTH = 1400
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
    pytest.mark.browser,
    pytest.mark.p1,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CHROMIUM)"
    ),
]


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
            assert "Requeue 1 job?" in page.inner_text("h1")  # the confirmation, with the exact count
            page.click("input[type=submit][value='Yes, requeue 1 job']")
            page.wait_for_selector(".messagelist")
            assert "Requeued 1 job(s)." in page.inner_text(".messagelist")
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


def test_cancel_a_tenants_jobs_and_pause_their_queue_in_a_real_browser(
    live_server, django_user_model, settings
):
    settings.JOBQ = {**settings.JOBQ, "HEARTBEAT_SECONDS": 10}
    django_user_model.objects.create_superuser("oncall", "oncall@example.com", "correct horse")
    seed()
    tenant = list(
        Job.objects.filter(tags__contains=["tenant:42"], status__in=[0, 1]).values_list("pk", flat=True)
    )
    tagged = set(Job.objects.filter(tags__contains=["tenant:42"]).values_list("pk", flat=True))
    # Playwright's sync API runs an event loop in this thread: the ORM is used only before and after it.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next=/admin/django_jobq/job/")
            page.fill("#id_username", "oncall")
            page.fill("#id_password", "correct horse")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/django_jobq/job/")
            page.click("a.jobq-tag:text-is('tenant:42')")  # a tag on the list links to its jobs
            page.wait_for_url("**q=tag%3Atenant%3A42")
            shown = {int(v) for v in page.locator("input[name=_selected_action]").evaluate_all(
                "boxes => boxes.map(b => b.value)")}  # fmt: skip
            assert shown == tagged and set(tenant) < tagged  # the cancelled one is listed too
            page.check("#action-toggle")
            page.select_option("select[name=action]", "cancel_selected")
            page.click("button[name=index]")
            assert "Cancel 3 jobs?" in page.inner_text("h1")  # the cancelled one is not counted
            page.click("input[type=submit][value='Yes, cancel 3 jobs']")
            page.wait_for_selector(".messagelist")
            assert "Cancelled 2 pending job(s); asked 1 running job(s) to stop." in page.inner_text(
                ".messagelist"
            )

            page.fill("#searchbar", '{"tenant": 7}')  # payload containment
            page.press("#searchbar", "Enter")
            page.wait_for_selector("#result_list")
            assert page.locator("#result_list tbody tr").count() == 1

            page.goto(f"{live_server.url}/admin/django_jobq/job/dashboard/")
            row = page.locator("#jobq-queues tbody tr", has=page.locator("th a:text-is('reports')"))
            row.locator("button[value=pause]").click()
            page.wait_for_selector(".messagelist")
            row = page.locator("#jobq-queues tbody tr", has=page.locator("th a:text-is('reports')"))
            assert "paused" in row.inner_text() and row.locator("button[value=resume]").count() == 1
        finally:
            browser.close()

    statuses = dict(Job.objects.filter(pk__in=tenant).values_list("pk", "status"))
    assert sorted(statuses.values()) == [JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.CANCELLED]
    asked = Job.objects.get(pk__in=tenant, status=JobStatus.RUNNING)
    assert asked.cancel_requested_at is not None and asked.cancelled_by == "admin oncall"
    assert Job.objects.get(payload__tenant=7).status == JobStatus.PENDING  # another tenant's job stays
    assert Job.objects.paused_queues() == ["reports"]


# Every page of the admin, by the path it lives at; "{dead}" / "{worker}" / ... are filled from seed().
PAGES = {
    "index": "/admin/",
    "app_index": "/admin/django_jobq/",
    "dashboard": "/admin/django_jobq/job/dashboard/",
    "job_list": "/admin/django_jobq/job/",
    "job_running": "/admin/django_jobq/job/{running}/change/",
    "job_dead": "/admin/django_jobq/job/{dead}/change/",
    "job_cancelled": "/admin/django_jobq/job/{cancelled}/change/",
    "job_cancel_requested": "/admin/django_jobq/job/{cancel_requested}/change/",
    "jobs_by_tag": "/admin/django_jobq/job/?q=tag%3Atenant%3A42",
    "dead_letters": "/admin/django_jobq/deadjob/",
    "dead_letter": "/admin/django_jobq/deadjob/{dead}/change/",
    "requeue": "/admin/django_jobq/job/{dead}/requeue/",
    "delete": "/admin/django_jobq/deadjob/{dead}/delete/",
    "workers": "/admin/django_jobq/workerrecord/",
    "worker": "/admin/django_jobq/workerrecord/{worker}/change/",
    "schedules": "/admin/django_jobq/schedule/",
    "schedule_from_settings": "/admin/django_jobq/schedule/{settings_schedule}/change/",
    "schedule_from_admin": "/admin/django_jobq/schedule/{admin_schedule}/change/",
    "workflows": "/admin/django_jobq/workflow/",
    "workflow": "/admin/django_jobq/workflow/{workflow}/change/",
    "job_waiting": "/admin/django_jobq/job/{waiting}/change/",
    "bulk_actions": "/admin/django_jobq/bulkaction/",
}

# The page's layout, measured in the browser: the breadcrumbs' style against the admin's own variables,
# every table header cell's text box, and the widths that would need a horizontal scroll.
MEASURE = """() => {
  const probe = document.createElement("div");
  probe.style.background = "var(--breadcrumbs-bg)";
  document.body.appendChild(probe);
  const expectedBg = getComputedStyle(probe).backgroundColor;
  probe.remove();
  const crumbs = document.querySelector(".breadcrumbs");
  let breadcrumbs = null;
  if (crumbs) {
    const style = getComputedStyle(crumbs), box = crumbs.getBoundingClientRect();
    const items = [...crumbs.querySelectorAll("li")].map(li => li.getBoundingClientRect().top);
    breadcrumbs = {
      tag: crumbs.tagName.toLowerCase(), text: crumbs.innerText.replace(/\\s+/g, " ").trim(),
      bg: style.backgroundColor, expectedBg, paddingLeft: style.paddingLeft,
      width: box.width, height: box.height,
      lineHeight: parseFloat(style.lineHeight) || 20, itemTops: items,
    };
  }
  const headers = [...document.querySelectorAll("#content table thead tr")].map(row =>
    [...row.children].map(cell => {
      // The box of the header's words (its text nodes), not of the block elements that hold them.
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      let left = Infinity, right = -Infinity;
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (!node.textContent.trim()) continue;
        const range = document.createRange();
        range.selectNodeContents(node);
        for (const rect of range.getClientRects()) {
          left = Math.min(left, rect.left); right = Math.max(right, rect.right);
        }
      }
      const box = cell.getBoundingClientRect();
      return {
        text: cell.innerText.trim(), left, right, cellRight: box.right,
        clipped: cell.scrollWidth > cell.clientWidth + 1 ||
          [...cell.querySelectorAll("*")].some(e => e.scrollWidth > e.clientWidth + 1 &&
                                                  getComputedStyle(e).overflow !== "visible"),
      };
    }).filter(cell => cell.text));
  const scrollers = [...document.querySelectorAll("#content .results, #content .module, #content table")]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.id || e.className || e.tagName);
  return {breadcrumbs, headers, scrollers, pageWidth: document.documentElement.scrollWidth,
          viewport: window.innerWidth};
}"""


def layout_problems(name: str, layout: dict) -> list[str]:
    """What a reader would notice at 1400 px: unstyled breadcrumbs, run-together or cut headers, scrolling."""
    problems = []
    crumbs = layout["breadcrumbs"]
    if name != "index":  # the admin's home page has no breadcrumbs
        if crumbs is None:
            problems.append("no breadcrumbs")
        else:
            if crumbs["bg"] != crumbs["expectedBg"]:
                problems.append(
                    f"breadcrumbs unstyled: background {crumbs['bg']}, not {crumbs['expectedBg']}"
                )
            if crumbs["paddingLeft"] == "0px":
                problems.append("breadcrumbs without the admin's padding")
            if crumbs["width"] < layout["viewport"] - 20:
                problems.append(f"breadcrumbs {crumbs['width']}px wide, not the page's width")
            if crumbs["height"] > 3 * crumbs["lineHeight"]:
                problems.append(f"breadcrumbs wrap over {crumbs['height']}px (one line expected)")
            if len(set(crumbs["itemTops"])) > 1:
                problems.append("breadcrumb items are not on one line")
            if not crumbs["text"].startswith("Home"):
                problems.append(f"breadcrumbs read {crumbs['text']!r}")
    for row in layout["headers"]:
        for left, right in itertools.pairwise(row):
            if right["left"] - left["right"] < 8:
                problems.append(f"headers {left['text']!r} and {right['text']!r} run together")
        for cell in row:
            if cell["clipped"]:
                problems.append(f"header {cell['text']!r} is cut off")
            if cell["cellRight"] > layout["viewport"]:
                problems.append(f"header {cell['text']!r} is past the right edge ({cell['cellRight']}px)")
    if layout["pageWidth"] > layout["viewport"]:
        problems.append(f"the page scrolls sideways ({layout['pageWidth']}px wide)")
    if layout["scrollers"]:
        problems.append(f"these scroll sideways: {layout['scrollers']}")
    return problems


def test_select_all_runs_a_bulk_action_in_the_background_and_one_can_be_stopped(
    live_server, django_user_model, settings, worker_thread
):
    """Dead letters of a queue, all of them (more than a page): the confirmation counts them exactly,
    the requeue runs as a job of the console's queue in batches; a bulk cancel is stopped from the bulk
    actions' page before it ran, and changes nothing."""
    from django_jobq.models import BulkAction

    settings.JOBQ = {**settings.JOBQ, "BULK_QUEUE": "console", "BULK_BATCH": 20}
    django_user_model.objects.create_superuser("oncall", "oncall@example.com", "correct horse")
    seed()
    now = timezone.now()
    Job.objects.bulk_create(
        Job(task="shop.send_receipt", queue="emails", status=JobStatus.DEAD, attempts=3, max_attempts=3,
            payload={"order": 1000 + i}, last_error=TRACEBACK, exception="smtplib.SMTPServerDisconnected",
            finished_at=now)
        for i in range(60)
    )  # fmt: skip
    Job.objects.bulk_create(
        Job(task="shop.export_report", queue="reports", payload={"tenant": 5, "report": i}) for i in range(60)
    )
    dead = set(Job.objects.filter(queue="emails", status=JobStatus.DEAD).values_list("pk", flat=True))
    reports = dict(Job.objects.filter(queue="reports").values_list("pk", "status"))
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{live_server.url}/admin/login/?next=/admin/")
            page.fill("#id_username", "oncall")
            page.fill("#id_password", "correct horse")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/")
            page.goto(f"{live_server.url}/admin/django_jobq/deadjob/?queue=emails")
            page.check("#action-toggle")
            page.click(".actions .question a")  # "Select all 63 dead letters"
            page.select_option("select[name=action]", "requeue_selected")
            page.click("button[name=index]")
            assert f"Requeue {len(dead)} jobs?" in page.inner_text("h1")
            assert "batches of 20 jobs" in page.inner_text("#content-main")
            page.click(f"input[type=submit][value='Yes, requeue {len(dead)} jobs']")
            page.wait_for_selector(".messagelist")
            assert f"Bulk requeue of {len(dead)} job(s) started" in page.inner_text(".messagelist")
            page.click(".messagelist a:text('its progress')")
            assert "running: 0 changed" in page.inner_text("#content-main")

            page.goto(f"{live_server.url}/admin/django_jobq/job/?queue=reports")
            page.check("#action-toggle")
            page.click(".actions .question a")  # every job of the queue, more than a page
            page.select_option("select[name=action]", "cancel_selected")
            page.click("button[name=index]")
            page.click("input[type=submit][value^='Yes, cancel']")
            page.wait_for_selector(".messagelist")
            page.goto(f"{live_server.url}/admin/django_jobq/bulkaction/?action=cancel")
            page.check("#action-toggle")
            page.select_option("select[name=action]", "stop_selected")
            page.click("button[name=index]")
            page.wait_for_selector(".messagelist")
            assert "Asked 1 bulk action(s) to stop" in page.inner_text(".messagelist")
            assert "(stop requested)" in page.inner_text("#result_list")
        finally:
            browser.close()

    worker_thread({"console": 1})  # the console's queue, served by a real worker
    wait_until(
        lambda: not BulkAction.objects.filter(state="running").exists(), message="both bulk actions to end"
    )
    requeue, cancel = BulkAction.objects.order_by("id")
    assert (requeue.state, requeue.done, cancel.state, cancel.done) == ("done", len(dead), "cancelled", 0)
    assert set(Job.objects.filter(pk__in=dead).values_list("status", flat=True)) == {JobStatus.PENDING}
    assert dict(Job.objects.filter(queue="reports").values_list("pk", "status")) == reports
    assert LogEntry.objects.filter(user__username="oncall").count() == 2  # one per action


def test_every_admin_page_reads_well_at_1400px(live_server, django_user_model, settings):
    """Each page in PAGES: screenshot, styled breadcrumbs, headers apart and whole, nothing past the edge."""
    settings.JOBQ = {**settings.JOBQ, "HEARTBEAT_SECONDS": 10}
    user = django_user_model.objects.create_superuser("oncall", "oncall@example.com", "correct horse")
    dead = seed()
    workflow = seed_workflow()
    ids = {
        "workflow": workflow.id,
        "waiting": workflow.job_ids[-1],
        "dead": dead.pk,
        "running": Job.objects.filter(status=JobStatus.RUNNING)
        .order_by("id")
        .values_list("pk", flat=True)[0],
        "worker": WorkerRecord.objects.order_by("worker_id").values_list("pk", flat=True)[0],
        "cancelled": Job.objects.get(status=JobStatus.CANCELLED).pk,
        "cancel_requested": Job.objects.get(cancel_requested_at__isnull=False, status=JobStatus.RUNNING).pk,
        "settings_schedule": Schedule.objects.get(source=ScheduleSource.SETTINGS).pk,
        "admin_schedule": Schedule.objects.get(source=ScheduleSource.ADMIN).pk,
    }
    client = Client()
    client.force_login(user)
    session = client.cookies[django.conf.settings.SESSION_COOKIE_NAME].value
    VERSION_ARTIFACTS.mkdir(parents=True, exist_ok=True)

    from playwright.sync_api import sync_playwright

    problems: dict[str, list[str]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": WIDTH, "height": 900})
            context.add_cookies(
                [{"name": django.conf.settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}]
            )
            page = context.new_page()
            for name, address in PAGES.items():
                response = page.goto(live_server.url + address.format(**ids))
                assert response is not None and response.status == 200, (name, response and response.status)
                page.screenshot(path=str(VERSION_ARTIFACTS / f"{name}.png"), full_page=True)
                found = layout_problems(name, page.evaluate(MEASURE))
                if found:
                    problems[name] = found
        finally:
            browser.close()
    assert not problems, f"Django {django.get_version()}: {problems}"
