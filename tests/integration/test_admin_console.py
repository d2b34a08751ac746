"""The job list at volume (docs/admin.md, "The job list with millions of jobs"): filters that never read
the backlog, sorts only where an index serves them, searches that go to their index or a bounded
window, pages that never offset deep, and the dead letters' stored exception."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobq.admin import listing
from django_jobq.console import search
from django_jobq.models import Job
from tests.integration.conftest import dead_job, make_job, running_job

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"


def listed(client, query: dict) -> list[int]:
    response = client.get(JOBS, query)
    assert response.status_code == 200
    return [job.pk for job in response.context["cl"].result_list]


def job_statements(queries) -> list[str]:
    return [q["sql"] for q in queries if 'FROM "jobq_job"' in (q["sql"] or "")]


def page_statement(queries) -> str:
    """The statement that read the list's page of jobs (not the filters', not the count)."""
    (page,) = [sql for sql in job_statements(queries) if sql.startswith('SELECT "jobq_job"."id", ')]
    return page


# -- filters -----------------------------------------------------------------------------------------------
def test_the_filters_come_from_the_configuration_and_the_dead_letters_never_the_backlog(admin_client):
    make_job(task="legacy.unregistered", queue="backlog-only")  # PENDING, in no configuration
    running_job(task="legacy.other", queue="running-only")
    dead_job(task="legacy.dead", queue="dead-only")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(JOBS)
    filters = {f.title: [c["display"] for c in f.choices(response.context["cl"])][1:] for f in
               response.context["cl"].filter_specs}  # fmt: skip
    # The Tasks backend's QUEUES, the registered tasks' queues, and the dead letters' queue.
    assert {"default", "emails", "slow", "other", "dead-only"} <= set(filters["queue"])
    assert "backlog-only" not in filters["queue"] and "running-only" not in filters["queue"]
    assert "test.echo" in filters["task"] and "legacy.dead" in filters["task"]
    assert "legacy.unregistered" not in filters["task"]
    distinct = [sql for sql in job_statements(queries) if "DISTINCT" in sql]
    assert len(distinct) == 1 and '"jobq_job"."status" = 3' in distinct[0], distinct  # jobq_job_dead only
    # A name the filters do not offer still filters, by the address.
    assert len(listed(admin_client, {"queue": "backlog-only"})) == 1


# -- sorting -----------------------------------------------------------------------------------------------
def order_of(client, query: dict) -> str:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(JOBS, query)
    assert response.status_code == 200
    return page_statement(queries).split(" ORDER BY ", 1)[1].split(" LIMIT ")[0]


@pytest.mark.parametrize(
    ("query", "order"),
    [
        ({}, '"jobq_job"."id" DESC'),
        ({"o": "4"}, '"jobq_job"."id" DESC'),  # by status: a sort of the whole table, ignored
        ({"o": "5"}, '"jobq_job"."id" DESC'),  # by run at without a status: ignored
        ({"status__exact": "0", "o": "5"}, '"jobq_job"."id" DESC'),  # the backlog: ignored
        ({"status__exact": "3", "o": "5"}, '"jobq_job"."run_at" ASC, "jobq_job"."id" DESC'),
        ({"status__exact": "2", "o": "-6"}, '"jobq_job"."finished_at" DESC, "jobq_job"."id" DESC'),
        ({"status__exact": "2", "o": "1"}, '"jobq_job"."id" ASC'),
    ],
)
def test_the_list_sorts_only_where_an_index_serves_the_order(admin_client, query, order):
    dead_job()
    assert order_of(admin_client, query) == order


def test_a_finished_list_shows_and_sorts_by_when_jobs_finished(admin_client):
    dead_job()
    page = admin_client.get(JOBS, {"status__exact": "3"}).content.decode()
    assert 'class="sortable column-finished_cell' in page and "column-progress_cell" not in page
    page = admin_client.get(JOBS).content.decode()
    assert "column-progress_cell" in page and 'class="sortable column-status_cell' not in page


# -- search ------------------------------------------------------------------------------------------------
def test_the_search_prefixes_go_to_their_columns(admin_client):
    keyed = make_job(task="shop.send_email", queue="emails", dedupe_key="order-17")
    other = make_job(task="shop.search", queue="interactive", dedupe_key="queue:emails")
    assert listed(admin_client, {"q": "key:order-17"}) == [keyed.pk]
    assert listed(admin_client, {"q": "queue:emails"}) == [keyed.pk]
    assert listed(admin_client, {"q": "task:shop.search"}) == [other.pk]
    assert listed(admin_client, {"q": "task:shop."}) == []  # task: is a whole name
    assert listed(admin_client, {"q": "shop."}) == [other.pk, keyed.pk]  # a bare word: a task's beginning


def test_the_key_search_reads_the_dedupe_index(admin_client):
    job = make_job(dedupe_key="order-17")
    with CaptureQueriesContext(connection) as queries:
        assert listed(admin_client, {"q": "key:order-17"}) == [job.pk]
    where = page_statement(queries).split(" WHERE ", 1)[1].split(" ORDER BY ")[0]
    assert where == '("jobq_job"."dedupe_key" = \'order-17\' AND NOT "jobq_job"."key_released")'


def test_an_unindexed_search_reads_the_newest_jobs_unless_a_status_narrows_it(admin_client, monkeypatch):
    monkeypatch.setattr(search, "WINDOW", 3)
    old = dead_job(payload={"order_id": 42})
    for _ in range(3):
        make_job(payload={"order_id": 7})
    new = make_job(payload={"order_id": 42})
    response = admin_client.get(JOBS, {"q": '{"order_id": 42}'})
    assert [job.pk for job in response.context["cl"].result_list] == [new.pk]
    assert "Searched the newest 3 jobs" in response.content.decode()
    # Filtered to the dead letters, it reads every DEAD job (their partial index), however old.
    assert listed(admin_client, {"q": '{"order_id": 42}', "status__exact": "3"}) == [old.pk]
    assert listed(admin_client, {"q": "test.echo", "status__exact": "3"}) == [old.pk]
    # PENDING is the backlog: windowed as the whole list is.
    assert listed(admin_client, {"q": '{"order_id": 42}', "status__exact": "0"}) == [new.pk]


# -- pages -------------------------------------------------------------------------------------------------
def test_no_page_beyond_the_deepest_offered(admin_client, monkeypatch):
    monkeypatch.setattr(listing, "MAX_PAGES", 2)
    Job.objects.bulk_create([Job(task="test.echo", payload={"i": i}) for i in range(160)])
    response = admin_client.get(JOBS)
    assert response.context["cl"].paginator.num_pages == 2
    assert response.context["cl"].result_count == 160  # the total is still the count
    assert admin_client.get(JOBS, {"p": "2"}).status_code == 200
    deep = admin_client.get(JOBS, {"p": "3"})
    assert deep.status_code == 302 and deep["Location"].endswith("?e=1")


def test_the_count_stops_at_its_time_budget_and_gives_the_estimate(monkeypatch):
    """A count past COUNT_BUDGET_MS is cancelled and the planner's estimate shown; the transaction
    around it (here the test's) goes on, with its own statement timeout."""
    from django.db.models.expressions import RawSQL

    monkeypatch.setattr(listing, "COUNT_BUDGET_MS", 50)
    make_job()
    slow = Job.objects.filter(id__in=RawSQL("SELECT id FROM jobq_job WHERE pg_sleep(0.2) IS NOT NULL", []))
    assert listing.bounded_count(slow) >= 1  # the estimate: the count was cancelled
    assert listing.bounded_count(Job.objects.all()) == 1
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"


# -- dead letters: the stored exception --------------------------------------------------------------------
def test_a_job_that_dies_stores_what_killed_it(admin_client):
    traceback = (
        'Traceback (most recent call last):\n  File "t.py", line 1\nsmtplib.SMTPServerDisconnected: gone'
    )
    classed = Job.objects.enqueue("test.echo", {"n": 1}, max_attempts=1)
    Job.objects.claim("w1")
    Job.objects.fail(classed, "w1", "ValueError: boom", error_class="builtins.ValueError")
    parsed = Job.objects.enqueue("test.echo", {"n": 2}, max_attempts=1)
    Job.objects.claim("w1")
    Job.objects.fail(parsed, "w1", traceback)
    retried = Job.objects.enqueue("test.echo", {"n": 3}, max_attempts=2)
    Job.objects.claim("w1")
    Job.objects.fail(retried, "w1", "KeyError: 'x'", error_class="builtins.KeyError")
    reaped = Job.objects.enqueue("test.echo", {"n": 4}, max_attempts=1)
    Job.objects.claim("w1", lease_seconds=0.001)
    Job.objects.filter(pk=reaped).update(lease_until=timezone.now() - timezone.timedelta(seconds=5))
    Job.objects.reap()
    died = dict(Job.objects.values_list("id", "exception"))
    assert died == {
        classed: "ValueError",
        parsed: "smtplib.SMTPServerDisconnected",
        retried: None,  # PENDING again: nothing killed it
        reaped: "lease expired",
    }
    response = admin_client.get(DEAD, {"exception": "smtplib.SMTPServerDisconnected"})
    assert [job.pk for job in response.context["cl"].result_list] == [parsed]


def test_the_dead_letter_groups_and_filter_read_the_column_not_the_error_text(admin_client):
    dead_job(task="shop.pay", exc="ValueError", exception="shop.errors.Declined")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(DEAD, {"exception": "shop.errors.Declined"})
    assert [(g.task, g.exception, g.jobs) for g in response.context["jobq_groups"]] == [
        ("shop.pay", "shop.errors.Declined", 1)
    ]
    assert len(response.context["cl"].result_list) == 1
    statements = " ".join(job_statements(queries))
    assert "last_error" not in re.sub(r'SELECT .*? FROM "jobq_job"', "", statements)  # never parsed
