"""Plans of the claim, prune and counts on tables of 200,000+ rows shaped to trap a naive plan: jobs
waiting in the future under a lower priority value, a due backlog spread over several queues,
thousands of priority values or queues, a long DONE history. Each test runs the statement under
EXPLAIN (ANALYZE, BUFFERS) and asserts what it read (node types, rows, pages), never how long it took;
then that it did the right thing."""

import json
import re

import pytest
from django.db import connection, transaction

from django_jobq.models import Job, JobStatus
from django_jobq.sql.postgres import jobs as postgres
from django_jobq.sql.postgres import retention
from tests.conftest import plan_nodes

# Transactional: the fixtures commit their rows and VACUUM ANALYZE them, as a live table would be; a
# rolled-back fill would leave its dead rows in the indexes for the next test to step over.
pytestmark = [pytest.mark.integration, pytest.mark.p1, pytest.mark.django_db(transaction=True)]

CLAIM = {"worker_id": "w", "lease": 30}
FUTURE = "now() + interval '1 hour' + g * interval '1 ms'"
PAST = "now() - interval '1 hour' + g * interval '1 ms'"


def fill(rows: int, *, queue="'default'", status=0, priority="100", run_at=PAST, result="NULL") -> None:
    """Insert ``rows`` jobs; each argument is an SQL expression over g, the row number."""
    terminal = status in (2, 3)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                      errors, created_at, finished_at, result, lease_until, worker_id)
                SELECT 'test.noop', {queue}, '{{"n": 1}}', {status}, {priority}, {run_at}, 1, 5, '[]', now(),
                       {run_at if terminal else "NULL"}, {result},
                       {"now() + interval '1 minute'" if status == 1 else "NULL"},
                       {"'w'" if status == 1 else "NULL"}
                FROM generate_series(1, {rows}) AS g"""
        )


@pytest.fixture(autouse=True)
def empty_table():
    """A new, empty jobq_job (no dead rows left by earlier tests)."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobq_job")


def analyse() -> None:
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE jobq_job")


def run(sql: str, params: dict, *, generic: bool = False) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of ``sql``: it runs (in the test's transaction). With ``generic``, as
    the generic plan of a prepared statement, which is what a long-lived connection may settle on."""
    values = {"now": None, **params}
    with transaction.atomic(), connection.cursor() as cursor:
        if not generic:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", values)
            plan = cursor.fetchone()[0]
        else:
            names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
            numbered = re.sub(r"%\((\w+)\)s", lambda m: f"${names.index(m.group(1)) + 1}", sql)
            cursor.execute(f"PREPARE jobq_plans AS {numbered}")
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            placeholders = f"({', '.join('%s' for _ in names)})" if names else ""
            cursor.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE jobq_plans{placeholders}",
                [values[n] for n in names],
            )
            plan = cursor.fetchone()[0]
            cursor.execute("DEALLOCATE jobq_plans")
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def scans(plan: dict) -> list[dict]:
    return [n for n in plan_nodes(plan) if n.get("Relation Name") == "jobq_job" and "Scan" in n["Node Type"]]


def pages(plan: dict) -> int:
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


def rows_read(plan: dict) -> int:
    """Rows the scans of jobq_job returned or filtered out, over all their loops."""
    return sum(
        (n.get("Actual Rows", 0) + n.get("Rows Removed by Filter", 0)) * n.get("Actual Loops", 1)
        for n in scans(plan)
    )


def assert_no_table_scan(plan: dict, *, bitmaps: bool = False) -> None:
    """No Seq Scan of jobq_job, no hash or merge join; no bitmap scan either unless ``bitmaps`` (a bitmap
    heap scan returns rows in table order, so on the claim path it would mean a sort)."""
    kinds = [(n["Node Type"], n.get("Index Name")) for n in scans(plan)]
    assert not [k for k in kinds if k[0] == "Seq Scan"], kinds
    assert bitmaps or not [k for k in kinds if k[0] == "Bitmap Heap Scan"], kinds
    assert not [n for n in plan_nodes(plan) if n["Node Type"] in ("Hash Join", "Merge Join")], kinds


def assert_sorts_at_most(plan: dict, rows: int) -> None:
    """Every Sort in the plan sorted at most ``rows`` rows: never the backlog."""
    for node in plan_nodes(plan):
        if node["Node Type"] == "Sort":
            fed = sum(c["Actual Rows"] * c["Actual Loops"] for c in node["Plans"])
            assert fed <= rows, f"a Sort read {fed} rows"


def walked(plan: dict) -> list[int]:
    """The rows each recursive walk (skip scan) of the plan produced, per loop."""
    return [
        n["Actual Rows"] // max(n["Actual Loops"], 1)
        for n in plan_nodes(plan)
        if n["Node Type"] == "Recursive Union"
    ]


def claimed(plan: dict) -> int:
    return plan["Actual Rows"]


# -- one queue: future jobs under a lower priority value ----------------------------------------------


@pytest.fixture
def future_backlog():
    """200,000 jobs waiting an hour (a retry backoff) at priority 50, 1,000 due at priority 100, and a
    DONE history of 50,000. The claim index orders the waiting jobs first."""
    fill(50_000, status=2)
    fill(200_000, priority="50", run_at=FUTURE)
    fill(1_000, priority="100")
    analyse()


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("limit", [1, 10])
def test_claim_skips_the_future_jobs_of_a_lower_priority(future_backlog, generic, limit):
    plan = run(postgres.CLAIM_ONE_QUEUE, {**CLAIM, "limit": limit, "queue": "default"}, generic=generic)
    assert claimed(plan) == limit
    assert_no_table_scan(plan)
    assert {n.get("Index Name") for n in scans(plan)} <= {"jobq_job_claim", "jobq_job_pkey"}
    # a plain range scan of the claim index reads its 200,000 future entries first (1,200+ pages); a
    # taken row costs its heap page, its index entries and the old row's fetch for the fair-queue
    # trigger's WHEN (jobq_job_fair_update)
    assert pages(plan) < 30 + 20 * limit, pages(plan)
    assert rows_read(plan) <= 3 * limit + 5
    assert walked(plan) == [2]  # the priorities 50 and 100, one descent each
    assert plan["Total Cost"] < 10_000  # far below the default jit_above_cost (100,000)
    assert set(Job.objects.filter(status=1).values_list("priority", flat=True)) == {100}


@pytest.fixture
def future_in_the_same_lane():
    """200,000 jobs waiting an hour and 3 due, all at priority 100."""
    fill(200_000, priority="100", run_at=FUTURE)
    fill(3, priority="100")
    analyse()


def test_claim_stops_at_the_first_future_job_of_its_lane(future_in_the_same_lane):
    # A batch larger than the due jobs: a plain scan would read on through the 200,000 waiting ones.
    plan = run(postgres.CLAIM_ONE_QUEUE, {**CLAIM, "limit": 10, "queue": "default"})
    assert claimed(plan) == 3
    assert_no_table_scan(plan)
    assert pages(plan) < 100, pages(plan)  # a plain scan: 1,000+


@pytest.fixture
def thousands_of_priorities():
    """200,000 future jobs over 10,000 distinct priority values, then 1,000 due ones after them."""
    fill(200_000, priority="(g % 10000) - 10000", run_at=FUTURE)
    fill(1_000, priority="5000")
    analyse()


def test_the_priority_walk_is_bounded_by_many_priority_values(thousands_of_priorities):
    plan = run(postgres.CLAIM_ONE_QUEUE, {**CLAIM, "limit": 5, "queue": "default"})
    # At most _WALK distinct values are visited one by one; the rest is one plain range, which still
    # finds the due jobs beyond them.
    assert walked(plan) == [postgres._WALK]
    assert claimed(plan) == 5
    assert_no_table_scan(plan)
    assert set(Job.objects.filter(status=1).values_list("priority", flat=True)) == {5000}


# -- several queues and every queue: a due backlog ------------------------------------------------------


@pytest.fixture
def due_backlog():
    """210,000 due jobs over queues a, b and c at priorities 0/50/100, 1,000 more in "default", and a
    DONE history of 50,000."""
    fill(50_000, status=2)
    for name in "abc":
        fill(70_000, queue=f"'{name}'", priority="(g % 3) * 50", run_at="now() - g * interval '1 ms'")
    fill(1_000, priority="0")
    analyse()


def _best(queues: list[str] | None, limit: int) -> list[int]:
    due = Job.objects.filter(status=0)
    if queues is not None:
        due = due.filter(queue__in=queues)
    return list(due.order_by("priority", "run_at", "id").values_list("id", flat=True)[:limit])


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize(
    "statement, queues", [("CLAIM_QUEUES", ["a", "b"]), ("CLAIM_ANY_QUEUE", None)], ids=["several", "all"]
)
@pytest.mark.parametrize("limit", [1, 10])
def test_claims_over_queues_merge_per_queue_walks(due_backlog, statement, queues, limit, generic):
    best = _best(queues, limit)
    plan = run(getattr(postgres, statement), {**CLAIM, "limit": limit, "queues": queues}, generic=generic)
    assert claimed(plan) == limit
    assert_no_table_scan(plan)
    named = 2 if queues else 4
    # the merge sorts at most `limit` rows per queue, never the 210,000 due
    assert_sorts_at_most(plan, named * limit)
    assert rows_read(plan) <= named * (3 * limit + 3)
    assert pages(plan) < 80 + 25 * named * limit, pages(plan)
    assert plan["Total Cost"] < 100_000  # no JIT compilation at the default thresholds
    assert sorted(Job.objects.filter(status=1).values_list("id", flat=True)) == sorted(best)


def test_claims_settle_on_their_generic_plans(due_backlog):
    """The claims are prepared; their custom plans cost what the generic plan costs, so PostgreSQL
    stops planning them after its first five executions."""
    for _ in range(8):
        Job.objects.claim("w", queues=["a"])
        Job.objects.claim("w", queues=["a", "b"])
        Job.objects.claim("w")
        Job.objects.complete_and_claim("w", [], 1, "c")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%picked AS MATERIALIZED%"],
        )
        plans = [row[0] for row in cursor.fetchall()]
    assert len(plans) == 4 and min(plans) >= 3, plans


def _scans_outside(plan: dict, parts: set[str]) -> list[dict]:
    """The scans of jobq_job that are not under one of the CTEs named ``parts``."""
    if plan.get("Subplan Name") in parts:
        return []
    own = [plan] if plan.get("Relation Name") == "jobq_job" and "Scan" in plan["Node Type"] else []
    return own + [scan for child in plan.get("Plans", []) for scan in _scans_outside(child, parts)]


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_a_claim_with_nothing_to_write_reads_nothing_for_the_completion(generic):
    """An idle lane's claim (no outcome to write) never runs the completion's scans: a generic plan
    made while the table was small would scan the whole table there, at every claim."""
    fill(20, status=2)
    fill(5, queue="'a'")
    analyse()
    params = {**CLAIM, "limit": 1, "queue": "a", "ids": [], "fences": [], "results": [], "done_channel": "d"}
    plan = run(postgres.COMPLETE_AND_CLAIM, params, generic=generic)
    completion = _scans_outside(plan, {"CTE picked", "CTE claimed"})  # done_mine, done, done_busy
    assert all(scan["Actual Loops"] == 0 for scan in completion), completion
    assert completion or not generic  # a custom plan may leave them out altogether
    assert claimed(plan) == 1


@pytest.fixture
def thousands_of_queues():
    """200,000 due jobs over 5,000 queues."""
    fill(200_000, queue="'q' || (g % 5000)", run_at="now() - g * interval '1 ms'")
    analyse()


def test_the_queue_walk_is_bounded_by_many_queues(thousands_of_queues):
    plan = run(postgres.CLAIM_ANY_QUEUE, {**CLAIM, "limit": 3})
    assert claimed(plan) == 3
    assert_no_table_scan(plan)
    assert max(walked(plan)) == postgres._WALK  # the queues, and in each a walk of one lane
    assert_sorts_at_most(plan, postgres._WALK * 3)
    assert pages(plan) < 2_000, pages(plan)


# -- prune: a long DONE history -----------------------------------------------------------------------


@pytest.fixture
def history():
    """300,000 recent DONE jobs, 6,000 DONE and 6,000 DEAD jobs two days old, 1,000 pending."""
    fill(300_000, status=2, run_at="now() - g * interval '100 ms'")
    fill(6_000, status=2, run_at="now() - interval '2 days' - g * interval '1 s'")
    fill(6_000, status=3, run_at="now() - interval '2 days' - g * interval '1 s'")
    fill(1_000)
    analyse()


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("status", [2, 3], ids=["DONE", "DEAD"])
def test_prune_deletes_its_batch_by_primary_key(history, status, generic):
    before = Job.objects.filter(status=status).count()
    plan = run(retention.PRUNE, {"status": status, "age": 86_400, "batch": 5_000}, generic=generic)
    assert_no_table_scan(plan, bitmaps=True)
    names = {n.get("Index Name") for n in plan_nodes(plan)} - {None}
    # the workflow checks' lookups are planned but never run for jobs outside workflows; the edges of
    # the deleted jobs are deleted by primary key (none here: an empty array)
    workflow_checks = {"jobq_job_workflow", "jobq_dependency_of"}
    assert names - workflow_checks - {"jobq_dependency_pkey"} == {"jobq_job_finished", "jobq_job_pkey"}, names
    assert all(n["Actual Loops"] == 0 for n in plan_nodes(plan) if n.get("Index Name") in workflow_checks)
    delete = [n for n in scans(plan) if n.get("Index Name") == "jobq_job_pkey" and n["Actual Loops"]]
    assert len(delete) == 1 and delete[0]["Node Type"] == "Index Scan" and delete[0]["Actual Rows"] == 5_000
    # the batch from the index (only that status's old rows), then each row by primary key
    assert rows_read(plan) <= 2 * 5_000
    assert Job.objects.filter(status=status).count() == before - 5_000


def test_prune_never_deletes_recent_or_other_jobs(history):
    total = Job.objects.count()
    assert Job.objects.prune(JobStatus.DEAD, 86_400, 10_000) == 6_000
    assert Job.objects.count() == total - 6_000
    assert Job.objects.filter(status=3).count() == 0
    assert Job.objects.filter(status=2).count() == 306_000


# -- counts: a long DONE history, with an exact count of every status -----------------------------------


@pytest.fixture
def wide_history():
    """200,000 DONE jobs with a 300-byte result each, 20,000 pending (half in "b"), 500 running, 500 dead;
    vacuumed, so the visibility map lets the partial indexes answer alone."""
    big = "to_jsonb(repeat('x', 300))"
    fill(200_000, status=2, result=big, run_at="now() - g * interval '10 ms'")
    fill(10_000)
    fill(10_000, queue="'b'", run_at=FUTURE)
    fill(500, status=1)
    fill(500, status=3, queue="'b'")
    analyse()


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_counts_read_the_partial_indexes_only(wide_history, generic):
    for sql, params in ((retention.COUNTS, {}), (retention.COUNTS_QUEUE, {"queue": "b"})):
        plan = run(sql, params, generic=generic)
        assert_no_table_scan(plan)
        assert {n.get("Index Name") for n in scans(plan)} == {
            "jobq_job_claim", "jobq_job_lease", "jobq_job_finished", "jobq_job_dead", "jobq_job_waiting",
            "jobq_job_cancelled",
        }  # fmt: skip
    assert Job.objects.counts() == {
        "PENDING": 20_000,
        "RUNNING": 500,
        "DONE": 200_000,
        "DEAD": 500,
        "CANCELLED": 0,
        "WAITING": 0,
    }
    assert Job.objects.counts("b") == {
        "PENDING": 10_000,
        "RUNNING": 0,
        "DONE": 0,
        "DEAD": 500,
        "CANCELLED": 0,
        "WAITING": 0,
    }
    assert Job.objects.counts("nowhere") == {
        "PENDING": 0,
        "RUNNING": 0,
        "DONE": 0,
        "DEAD": 0,
        "CANCELLED": 0,
        "WAITING": 0,
    }


# -- tags: cancel_many's selection -----------------------------------------------------------------


@pytest.mark.parametrize("generic", [False, True])
def test_cancel_many_by_tags_reads_the_tagged_jobs_only(generic):
    """200,000 due jobs without tags and 40 with: the selection of cancel_many(tags=...) finds the 20
    of one tenant on jobq_job_tags, never walking the backlog."""
    from django_jobq.sql.postgres import control

    fill(200_000)
    with connection.cursor() as cursor:
        cursor.execute(
            """UPDATE jobq_job SET tags = jsonb_build_array('tenant:' || (id % 2), 'export')
               WHERE id IN (SELECT id FROM jobq_job ORDER BY id DESC LIMIT 40)"""
        )
    analyse()
    params = {
        "after": 0, "until": 1 << 62, "queue": None, "task": None, "tags": '["tenant:1"]', "limit": 1000,
    }  # fmt: skip
    plan = run(control.CANCEL_SELECT_TAGGED, params, generic=generic)
    assert plan["Actual Rows"] == 20
    assert "jobq_job_tags" in {n.get("Index Name") for n in plan_nodes(plan)}
    assert_no_table_scan(plan, bitmaps=True)
    assert rows_read(plan) <= 40


@pytest.mark.slow
def test_the_metrics_collectors_statements_read_the_partial_indexes_at_a_million_done_rows():
    """metrics.database's statements (ACTIVE, DONE_ESTIMATE, PAUSED, WORKERS, HEALTH) never read the DONE
    history: no table scan, and the pages they touch are those of the backlog, not of the table."""
    from django_jobq.sql.postgres import stats

    fill(1_000_000, status=2, result="'null'")
    fill(2_000)  # due backlog
    fill(200, status=3)  # dead letters
    fill(50, status=1)  # running
    analyse()
    statements = {
        "ACTIVE": (stats.ACTIVE, {}),
        "DONE_ESTIMATE": (stats.DONE_ESTIMATE, {}),
        "PAUSED": (stats.PAUSED, {}),
        "WORKERS": (stats.WORKERS, {"recent": 30, "limit": 500}),
        "HEALTH": (stats.HEALTH, {"alive": 10}),
    }
    for name, (sql, params) in statements.items():
        plan = run(sql, params)
        assert_no_table_scan(plan, bitmaps=True)
        assert rows_read(plan) <= 2_250, (name, rows_read(plan))
        assert pages(plan) < 300, (name, pages(plan))  # the table's heap alone is ~12,000 pages


# -- the admin: the dead letters' filters, a job found by its id ----------------------------------------


def run_queryset(queryset) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) of the statement an ORM queryset runs."""
    sql, params = queryset.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def test_the_dead_letters_filters_read_the_dead_index_only(wide_history):
    """The dead-letter page's queue and task filters list the names that have dead letters, from the
    (queue, task) entries of jobq_job_dead alone: 500 rows, never the 220,000 others."""
    from django_jobq import dashboard

    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobq_job SET task = 'test.t' || (id % 3) WHERE status = 3")
    analyse()
    dead = Job.objects.filter(status=JobStatus.DEAD)
    plan = run_queryset(dead.order_by("queue", "task").values_list("queue", "task").distinct()[:500])
    assert_no_table_scan(plan)
    assert [(n["Node Type"], n.get("Index Name")) for n in scans(plan)] == [
        ("Index Only Scan", "jobq_job_dead")
    ]
    assert rows_read(plan) <= 500
    assert not [n for n in plan_nodes(plan) if n["Node Type"] == "Sort"]  # the index's order
    assert dashboard.dead_letter_names() == (["b"], ["test.t0", "test.t1", "test.t2"])


def test_a_numeric_search_is_one_probe_of_the_primary_key(wide_history):
    """The job list's search for "123456": the job of that id, on the primary key, however long the
    table; its page of results and its count alike."""
    from django_jobq.console.search import search

    wanted = Job.objects.filter(status=JobStatus.DONE).order_by("id").values_list("id", flat=True)[1000]
    found, cut = search(Job.objects.order_by("-id"), str(wanted))
    assert not cut
    for queryset in (found[:51], found.order_by().values("id")[:10_001]):
        plan = run_queryset(queryset)
        assert_no_table_scan(plan)
        assert {n.get("Index Name") for n in scans(plan)} == {"jobq_job_pkey"}
        assert rows_read(plan) == 1
    assert [job.id for job in found] == [wanted]
