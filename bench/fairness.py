"""Fair queues (JOBQ["QUEUES"][q]["FAIR"]): the jobs of the "fair drain" row (W2 c4 in a fair queue,
its jobs spread over keys), and "fair claim", one of bench.child's operations: claim_batch latency
with a backlog of each size over the same keys."""

from __future__ import annotations

import time
from typing import Any

from bench import common
from bench.systems import System
from bench.systems.jobq import Jobq

FAIR = {"QUEUES": {"default": {"FAIR": True}}}  # the workloads' JOBQ setting
CLAIM_BATCH = 4  # jobs per measured claim: W2 c4's slots


def enqueue_fair(n: int, keys: int, kind: str) -> None:
    """``n`` jobs in one enqueue_many (one commit), key ``i % keys`` for the i-th."""
    from bench.systems.jobq import TASKS
    from django_jobq.managers import NewJob
    from django_jobq.models import Job

    Job.objects.enqueue_many(NewJob(TASKS[kind], {}, fairness_key=f"tenant-{i % keys}") for i in range(n))


def load(conn: Any, jobs: int, keys: int) -> None:
    """``jobs`` due no-op jobs over ``keys`` keys in one INSERT ... SELECT generate_series. The keys'
    rows are written first, as the enqueue trigger writes them (a new key at the lane's lowest vtime:
    0 here), and analysed, so that the trigger, which still runs for each job, finds its key's row by
    primary key; then VACUUM ANALYZE, as autovacuum leaves a live table."""
    with conn.transaction():
        conn.execute(
            "INSERT INTO jobq_fair_key (queue, priority, key, vtime)"
            " SELECT 'default', 100, 'tenant-' || g, 0 FROM generate_series(0, %s - 1) AS g",
            [keys],
        )
    conn.execute("ANALYZE jobq_fair_key")
    with conn.transaction():
        conn.execute(
            """
            INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                  errors, created_at, fairness_key)
            SELECT 'bench.noop', 'default', '{}'::jsonb, 0, 100, now(), 0, 5, '[]'::jsonb, now(),
                   'tenant-' || (g %% %s)
            FROM generate_series(1, %s) AS g
            """,
            [keys, jobs],
        )
    conn.execute("VACUUM ANALYZE jobq_job")
    conn.execute("VACUUM ANALYZE jobq_fair_key")


def fair_claim(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """For each backlog size of ``backlogs``: that many due jobs over ``keys`` keys of a fair queue,
    then ``claims`` calls of claim_batch(CLAIM_BATCH) one after another (no worker running), each timed;
    the p50 and p99 per size, in ms (fields p50_<size>, p99_<size>)."""
    assert isinstance(system, Jobq)
    system.open()
    from django_jobq.models import Job

    out: dict[str, Any] = {"keys": p["keys"], "claims": p["claims"], "batch": CLAIM_BATCH}
    for jobs in p["backlogs"]:
        system.reset()
        with common.connect(system.db_url) as conn:
            load(conn, jobs, p["keys"])
        for _ in range(20):  # warm-up: the connection, the statement's plan
            Job.objects.claim_batch("bench", CLAIM_BATCH, queues=["default"])
        took = []
        for _ in range(p["claims"]):
            t0 = time.perf_counter()
            claimed = Job.objects.claim_batch("bench", CLAIM_BATCH, queues=["default"])
            took.append((time.perf_counter() - t0) * 1000)
            if len(claimed) != CLAIM_BATCH:
                raise RuntimeError(f"a claim took {len(claimed)} jobs of a {jobs:,}-job backlog")
        out[f"p50_{label(jobs)}"] = common.percentile(took, 50)
        out[f"p99_{label(jobs)}"] = common.percentile(took, 99)
    return out


def label(jobs: int) -> str:
    """25000 -> "25k", 1000000 -> "1M"."""
    return f"{jobs // 1_000_000}M" if jobs % 1_000_000 == 0 else f"{jobs / 1000:g}k"
