"""Plans of a fair queue's claim (sql/postgres/fairness.py) at 1,000,000 due jobs over 10,000 keys:
no scan of the backlog, no sort of it, and pages read that do not grow with the jobs queued, in
custom plans and in the generic plans of prepared statements alike. Each claim runs under EXPLAIN
(ANALYZE, BUFFERS); what it read is asserted, never how long it took. Loading the jobs (the triggers of
migration 0013 fire for each row) takes half a minute or more: slow."""

import pytest
from django.db import connection

from django_jobq.sql.postgres import fairness
from tests.conftest import plan_nodes
from tests.integration.test_plans import assert_sorts_at_most, pages, rows_read, run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.p1,
    pytest.mark.django_db(transaction=True),
]

WEIGHTS = {"fair_keys": ["tenant-1", "tenant-2"], "fair_weights": [2.0, 4.0], "fair_weight": 1.0}
CLAIM = {"worker_id": "w", "lease": 30, "queue": "default", "queues": None, **WEIGHTS}
COMPLETE = {
    **CLAIM, "ids": [1, 2], "fences": [1, 1], "results": ["null", "null"], "exclude": [], "cap": None,
    "cap_tasks": [], "cap_most": [], "cap_key_most": [], "cap_ration": [], "done_channel": "jobq_done",
}  # fmt: skip
STATEMENTS = {"CLAIM_FAIR": CLAIM, "COMPLETE_AND_CLAIM_FAIR": COMPLETE}
LIMITS = (4, 16)


def load(jobs: int, keys: int, *, idle: int = 0) -> None:
    """``jobs`` due PENDING jobs of queue "default" spread evenly over ``keys`` fairness keys, in one
    INSERT ... SELECT generate_series. The keys' rows are made first as the trigger makes them (vtime
    0: a new key starts at the lane's lowest, none), but for the last key's, which the trigger creates;
    then ``idle`` rows of keys with no job (the reaper has yet to prune them)."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobq_job, jobq_fair_key")
        cursor.execute(
            """INSERT INTO jobq_fair_key (queue, priority, key, vtime)
               SELECT 'default', 100, 'tenant-' || g, 0 FROM generate_series(0, %s - 2) AS g
               UNION ALL SELECT 'default', 100, 'idle-' || g, 0 FROM generate_series(1, %s) AS g""",
            [keys, idle],
        )
        # Statistics first: the trigger's lookup of its key's row is then planned on the primary key.
        cursor.execute("ANALYZE jobq_fair_key")
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, fairness_key)
               SELECT 'test.noop', 'default', '{}', 0, 100, now() - interval '1 hour' + g * interval '1 ms',
                      0, 5, '[]', now(), 'tenant-' || (g %% %s)
               FROM generate_series(1, %s) AS g""",
            [keys, jobs],
        )
        cursor.execute("SELECT count(*) FROM jobq_fair_key WHERE key LIKE 'tenant-%'")
        assert cursor.fetchone()[0] == keys  # the trigger fired for the bulk insert: the last key's row
        cursor.execute("VACUUM ANALYZE jobq_job")
        cursor.execute("VACUUM ANALYZE jobq_fair_key")


def assert_no_table_scan(plan: dict, *, keys_too: bool) -> None:
    """No sequential or bitmap scan of jobq_job, nor a hash or merge join over one of its scans; with
    ``keys_too``, no sequential scan of jobq_fair_key either (at 100 keys, one page, it is cheapest)."""
    tables = ("jobq_job", "jobq_fair_key") if keys_too else ("jobq_job",)
    found = [
        (n["Node Type"], n["Relation Name"])
        for n in plan_nodes(plan)
        if n.get("Relation Name") in tables and n["Node Type"] in ("Seq Scan", "Bitmap Heap Scan")
    ]
    assert not found, found
    for join in plan_nodes(plan):
        if join["Node Type"] in ("Hash Join", "Merge Join"):
            assert not [n for n in plan_nodes(join) if n.get("Relation Name") == "jobq_job"], join


def claims(*, large: bool) -> dict[tuple[str, int, bool], int]:
    """Each fair claim statement at each limit, custom and generic: its plan checked, its pages read."""
    read = {}
    for name, params in STATEMENTS.items():
        for limit in LIMITS:
            for generic in (False, True):
                plan = run(getattr(fairness, name), {**params, "limit": limit}, generic=generic)
                where = (name, limit, "generic" if generic else "custom")
                assert plan["Actual Rows"] == limit, (where, plan["Actual Rows"])
                assert_no_table_scan(plan, keys_too=large)
                # A claim sorts at most the jobs of the keys it reads, never the keys nor the backlog.
                assert_sorts_at_most(plan, limit * limit)
                # Each of at most ``limit`` keys gives at most ``limit`` jobs: never the backlog.
                assert rows_read(plan) <= 3 * limit * limit + 100, (where, rows_read(plan))
                indexes = {
                    n.get("Index Name") for n in plan_nodes(plan) if n.get("Relation Name") == "jobq_job"
                }
                assert "jobq_job_fair" in indexes, (where, indexes)
                assert pages(plan) < 200 + 6 * limit * limit, (where, pages(plan))
                read[(name, limit, generic)] = pages(plan)
    return read


def test_fair_claims_read_as_many_pages_at_a_million_jobs_as_at_ten_thousand():
    # The same jobs per key (100) at both sizes: a claim reads the same keys' first jobs either way.
    load(10_000, 100)
    small = claims(large=False)
    load(1_000_000, 10_000)
    large = claims(large=True)
    for where, count in large.items():
        assert count <= 2 * small[where] + 20, (where, small[where], count)
    with connection.cursor() as cursor:  # the claims took jobs in turn from the keys of lowest vtime
        cursor.execute("SELECT count(DISTINCT fairness_key), count(*) FROM jobq_job WHERE status = 1")
        keys, running = cursor.fetchone()
    assert running == 2 * 2 * sum(LIMITS) and keys >= max(LIMITS), (keys, running)


def test_the_prune_lock_reads_the_keys_by_index_at_ten_thousand_keys():
    load(1_000_000, 10_000, idle=50)
    plan = run(fairness.FAIR_PRUNE_LOCK, {"limit": 100})
    assert plan["Actual Rows"] == 50  # the idle keys, and none with a PENDING job
    assert_no_table_scan(plan, keys_too=False)  # it reads every key's row: a scan of them is right
    probes = [n for n in plan_nodes(plan) if n.get("Relation Name") == "jobq_job"]
    assert probes and {n.get("Index Name") for n in probes} == {"jobq_job_fair"}, probes
    # One probe per key row, each stopping at its key's first PENDING job.
    assert rows_read(plan) <= 10_050, rows_read(plan)
