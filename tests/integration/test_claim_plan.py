"""The claim's cost follows the backlog, not the finished history: it uses the partial claim index."""

import pytest
from django.db import connection

from django_jobq.models import Job
from django_jobq.sql import postgres
from tests.conftest import explain, plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.p1, pytest.mark.django_db]


def test_claim_uses_the_partial_index_with_a_large_done_history():
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, finished_at)
               SELECT 'test.noop', 'default', '{}', 2, 100, now(), 1, 5, '[]', now(), now()
               FROM generate_series(1, 100000)"""
        )
    for i in range(5):
        Job.objects.enqueue("test.noop", {"i": i})
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobq_job")
    params = {"worker_id": "w", "limit": 10, "lease": 30, "now": None, "queue": "default"}
    plan = explain(postgres.CLAIM_ONE_QUEUE, params)
    nodes = list(plan_nodes(plan))
    picked = [n for n in nodes if n.get("Index Name") == "jobq_job_claim"]
    assert picked, (
        f"claim does not use jobq_job_claim: {[(n['Node Type'], n.get('Index Name')) for n in nodes]}"
    )
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"]
    # The rows the claim index yields are those of the backlog, not of the 100,000 DONE rows.
    assert all(n["Plan Rows"] < 1000 for n in picked)
    assert len(Job.objects.claim_batch("w", 10)) == 5
