"""``python -m bench.fair_latency``: a noisy tenant and quiet ones in one queue (docs/guide/fairness.md).

Three runs on the throwaway database at BENCH_DATABASE_URL, each with WORKERS bench workers of SLOTS
slots serving the queue "default", while QUIET tenants each enqueue one job a second for SECONDS:

- ``quiet alone``: a fair queue with nothing else in it (the reference);
- ``noisy, fair``: the same, behind NOISY due jobs of one tenant, the queue marked FAIR;
- ``noisy, unfair``: the same without FAIR.

For each: the quiet jobs' enqueue-to-start p50 / p99 (the database's clock: started_at - created_at),
and the whole queue's starts a second over the window. The fair run's quiet p99 against the reference
and its throughput against the unfair run's are the figures docs/benchmark.md reports.

    BENCH_DATABASE_URL=postgres://…/jobq_bench_fair python -m bench.fair_latency
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.systems.base import migrate, setup_django

NOISY, QUIET, SECONDS, WORKERS, SLOTS = 100_000, 20, 30.0, 2, 4
_NOISY_JOBS = """
INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts, errors,
                      created_at, fairness_key)
SELECT 'bench.noop', 'default', '{}'::jsonb, 0, 100, now(), 0, 5, '[]'::jsonb, now(), 'noisy'
FROM generate_series(1, %s)
"""
_QUIET_JOB = """
WITH job AS (
    INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts, errors,
                          created_at, fairness_key)
    VALUES ('bench.noop', 'default', '{}'::jsonb, 0, 100, clock_timestamp(), 0, 5, '[]'::jsonb,
            clock_timestamp(), %s)
    RETURNING id
)
SELECT id, pg_notify('jobq', 'default') FROM job
"""
_WAITS = """
SELECT extract(epoch FROM started_at - created_at) FROM jobq_job
WHERE fairness_key LIKE 'quiet-%%' AND started_at IS NOT NULL
"""
_STARTED = "SELECT count(*) FROM jobq_job WHERE started_at >= %s AND started_at < %s"


def run(url: str, logdir: Path, *, noisy: int, fair: bool, quiet: int, seconds: float) -> dict[str, Any]:
    """One run: returns the quiet p50/p99 in ms, the quiet jobs not started, and starts a second."""
    with common.connect(url) as conn:
        conn.execute("TRUNCATE jobq_job")
        conn.execute("DELETE FROM jobq_fair_key")
        if noisy:
            conn.execute(_NOISY_JOBS, [noisy])
        conn.execute("ANALYZE jobq_job")
    settings = {"QUEUES": {"default": {"FAIR": True}}} if fair else {}
    group = common.WorkerGroup("jobq", url, logdir, {"BENCH_JOBQ": json.dumps(settings)})
    stop = threading.Event()
    sent: list[int] = []

    def tenants() -> None:
        with common.connect(url) as producer:
            tick = time.monotonic()
            while not stop.is_set():
                for n in range(quiet):
                    sent.append(producer.execute(_QUIET_JOB, [f"quiet-{n}"]).fetchone()[0])
                tick += 1.0
                stop.wait(max(0.0, tick - time.monotonic()))

    try:
        for _ in range(WORKERS):
            group.start(SLOTS, SLOTS)
        group.wait_ready()
        time.sleep(1.0)  # the workers' first claims and connections, before the measured window
        with common.connect(url) as conn:
            began = conn.execute("SELECT now()").fetchone()[0]
            producer = threading.Thread(target=tenants, daemon=True)
            producer.start()
            time.sleep(seconds)
            stop.set()
            producer.join(10)
            ended = conn.execute("SELECT now()").fetchone()[0]
            time.sleep(2.0)  # the last quiet jobs start
            waits = sorted(1000 * float(w) for (w,) in conn.execute(_WAITS).fetchall())
            started = conn.execute(_STARTED, [began, ended]).fetchone()[0]
    finally:
        stop.set()
        group.stop()
    return {
        "quiet_p50_ms": round(statistics.median(waits), 1) if waits else None,
        "quiet_p99_ms": round(waits[min(len(waits) - 1, int(0.99 * len(waits)))], 1) if waits else None,
        "quiet_not_started": len(sent) - len(waits),
        "starts_per_s": round(started / (ended - began).total_seconds()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fair_latency", description=__doc__.split("\n")[0])
    parser.add_argument("--noisy", type=int, default=NOISY)
    parser.add_argument("--quiet", type=int, default=QUIET)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    args = parser.parse_args(argv)
    url = os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/jobq_bench_fair")
    with common.connect(url.rsplit("/", 1)[0] + "/postgres") as admin:
        name = url.rsplit("/", 1)[1]
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            admin.execute(f'CREATE DATABASE "{name}"')
    setup_django("jobq", url)
    migrate()
    results = {}
    with tempfile.TemporaryDirectory() as logs:
        for name, noisy, marked in (
            ("quiet alone", 0, True),
            ("noisy, fair", args.noisy, True),
            ("noisy, unfair", args.noisy, False),
        ):
            results[name] = run(
                url, Path(logs), noisy=noisy, fair=marked, quiet=args.quiet, seconds=args.seconds
            )
            print(f"{name:14} {results[name]}", flush=True)
    alone, fair, unfair = (results[k] for k in ("quiet alone", "noisy, fair", "noisy, unfair"))
    if alone["quiet_p99_ms"] and fair["quiet_p99_ms"]:
        print(f"quiet p99, fair / alone: {fair['quiet_p99_ms'] / alone['quiet_p99_ms']:.2f}x (target <= 2x)")
    if unfair["starts_per_s"]:
        print(
            f"throughput, fair / unfair: {fair['starts_per_s'] / unfair['starts_per_s']:.2f}x (target >= 0.9x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
