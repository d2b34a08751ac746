"""The hot statements' cost follows the backlog, not the finished history: they use the partial claim
index and the primary key, in custom plans and in the generic plans of prepared statements alike."""

import json
import re

import pytest
from django.db import connection

from django_jobq.models import Job
from django_jobq.sql import POSTGRES as postgres
from tests.conftest import explain, plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.p1, pytest.mark.django_db]

HOT = {
    "CLAIM_ONE_QUEUE": {"worker_id": "w", "limit": 10, "lease": 30, "queue": "default"},
    "COMPLETE_AND_CLAIM": {
        "worker_id": "w", "ids": [1, 2], "fences": [1, 1], "results": ["null", "null"],
        "limit": 10, "lease": 30, "queue": "default",
    },
    "COMPLETE_AND_CLAIM_REST": {
        "worker_id": "w", "ids": [1, 2], "fences": [1, 1], "results": ["null", "null"],
        "limit": 10, "lease": 30, "exclude": ["emails"],
    },
    "COMPLETE_MANY": {"worker_id": "w", "ids": [1, 2], "fences": [1, 1], "results": ["null", "null"]},
    "HEARTBEAT": {"worker_id": "w", "ids": [1, 2], "fences": [1, 1], "lease": 30},
    "RELEASE_UNSTARTED": {
        "worker_id": "w", "ids": [1, 2], "fences": [1, 1], "notify": True, "channel": "jobq",
    },
}  # fmt: skip
HOT["SNOOZE"] = {"worker_id": "w", "ids": [1, 2], "fences": [1, 1], "delays": [1.0, 1.0]}
# Statements that name their jobs by id: never the lease index, whose entries (one per job run since
# the last vacuum) a generic plan that expects few RUNNING rows would otherwise read in full.
BY_ID = ("COMPLETE_AND_CLAIM", "COMPLETE_MANY", "HEARTBEAT", "RELEASE_UNSTARTED", "SNOOZE")
# Reads of the backlog only: the claim index, never the table.
BACKLOG_READS = {"DUE_EXISTS": {"queue": "default"}, "DUE_EXISTS_REST": {"exclude": ["emails"]}}


def _insert(status: int, rows: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, finished_at)
               SELECT 'test.noop', 'default', '{}', %s, 100, now(), 1, 5, '[]', now(),
                      CASE WHEN %s = 2 THEN now() END
               FROM generate_series(1, %s)""",
            [status, status, rows],
        )
        cursor.execute("ANALYZE jobq_job")


@pytest.fixture
def large_history():
    """100,000 DONE jobs and a backlog of 5, analysed."""
    _insert(2, 100_000)
    for i in range(5):
        Job.objects.enqueue("test.noop", {"i": i})


@pytest.fixture
def busy_table():
    """100,000 DONE jobs, a backlog of 20,000 and 20,000 RUNNING: a generic plan must still find the
    rows it writes by primary key, whatever it guesses for the limit or the length of the id array."""
    _insert(2, 100_000)
    _insert(0, 20_000)
    _insert(1, 20_000)


@pytest.fixture
def few_running():
    """100,000 DONE jobs and 20 RUNNING, analysed: to a generic plan the lease index looks cheapest."""
    _insert(2, 100_000)
    _insert(1, 20)


def _generic_plan(sql: str, params: dict) -> dict:
    """EXPLAIN of the generic plan PostgreSQL would reuse for ``sql`` as a prepared statement."""
    names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql)
    values = {"now": None, "done_channel": "jobq_done", **params}
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE jobq_generic AS {numbered}")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        placeholders = ", ".join("%s" for _ in names)
        cursor.execute(
            f"EXPLAIN (FORMAT JSON) EXECUTE jobq_generic({placeholders})", [values[n] for n in names]
        )
        plan = cursor.fetchone()[0]
        cursor.execute("DEALLOCATE jobq_generic")
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def test_claim_uses_the_partial_index_with_a_large_done_history(large_history):
    plan = explain(postgres.CLAIM_ONE_QUEUE, HOT["CLAIM_ONE_QUEUE"])
    nodes = list(plan_nodes(plan))
    picked = [n for n in nodes if n.get("Index Name") == "jobq_job_claim"]
    assert picked, (
        f"claim does not use jobq_job_claim: {[(n['Node Type'], n.get('Index Name')) for n in nodes]}"
    )
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"]
    # The rows the claim index yields are those of the backlog, not of the 100,000 DONE rows.
    assert all(n["Plan Rows"] < 1000 for n in picked)
    assert len(Job.objects.claim_batch("w", 10)) == 5


@pytest.mark.parametrize("name", sorted(HOT))
def test_generic_plans_of_hot_statements_never_scan_the_table(busy_table, name):
    plan = _generic_plan(getattr(postgres, name), HOT[name])
    scans = [(n["Node Type"], n.get("Index Name")) for n in plan_nodes(plan) if "Scan" in n["Node Type"]]
    assert ("Seq Scan", None) not in scans, scans
    assert not [s for s in scans if s[0] == "Bitmap Heap Scan"], scans
    assert ("Index Scan", "jobq_job_pkey") in scans, scans


@pytest.mark.parametrize("name", sorted(BACKLOG_READS))
def test_generic_plans_of_backlog_reads_use_only_the_claim_index(busy_table, name):
    plan = _generic_plan(getattr(postgres, name), BACKLOG_READS[name])
    scans = {(n["Node Type"], n.get("Index Name")) for n in plan_nodes(plan) if "Scan" in n["Node Type"]}
    assert scans <= {("Index Only Scan", "jobq_job_claim"), ("Index Scan", "jobq_job_claim")}, scans


@pytest.mark.parametrize("name", BY_ID)
def test_statements_naming_their_jobs_by_id_read_the_primary_key_not_the_lease_index(few_running, name):
    plan = _generic_plan(getattr(postgres, name), HOT[name])
    indexes = {n.get("Index Name") for n in plan_nodes(plan) if "Scan" in n["Node Type"]}
    assert "jobq_job_lease" not in indexes, indexes
    assert "jobq_job_pkey" in indexes, indexes
