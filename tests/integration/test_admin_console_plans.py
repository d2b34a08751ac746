"""The admin's list pages with 2 million jobs in the table: every statement a page sends is planned on
an index, never a sequential scan of jobq_job (but for a count's, which stops at 10,001 rows and its
time budget), and never a sort of more than the few jobs of one small status. Loading the jobs takes
a minute or two (generate_series, bench/console.py): slow."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bench.console import load, pages
from django_jobq.models import Job

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

JOBS = 2_000_000
LARGEST_SORT = 50_000  # rows: the DEAD or CANCELLED jobs of a status, never the history or the backlog


@pytest.fixture
def two_million_jobs():
    with connection.cursor() as cursor:
        load(cursor, JOBS)
        cursor.execute("VACUUM ANALYZE jobq_job")
    yield
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobq_job CASCADE")


def nodes(plan: dict, limited: bool = False):
    """Each node of the plan, and whether a Limit is above it."""
    yield plan, limited
    for child in plan.get("Plans", ()):
        yield from nodes(child, limited or plan["Node Type"] == "Limit")


def problems(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        (raw,) = cursor.fetchone()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    found = []
    for node, limited in nodes(plan):
        kind = node["Node Type"]
        if kind == "Seq Scan" and node.get("Relation Name") == "jobq_job" and not limited:
            found.append(f"sequential scan of jobq_job: {sql}")
        if kind == "Sort" and node.get("Plan Rows", 0) > LARGEST_SORT:
            found.append(f"a sort of {node['Plan Rows']} rows: {sql}")
    return found


def test_every_list_page_reads_an_index_with_millions_of_jobs(two_million_jobs, admin_client):
    assert Job.objects.count() >= JOBS - 10
    newest = Job.objects.order_by("-id").values_list("id", flat=True).first()
    found = []
    for name, url in pages(newest - 1000, last_page=250).items():
        with CaptureQueriesContext(connection) as queries:
            response = admin_client.get(url)
        assert response.status_code in (200, 302), name
        statements = [
            q["sql"] for q in queries if (q["sql"] or "").startswith("SELECT") and '"jobq_job"' in q["sql"]
        ]
        assert statements or response.status_code == 302, name
        for sql in statements:
            found += [f"{name}: {problem}" for problem in problems(sql)]
    assert found == []
