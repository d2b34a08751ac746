"""What batch tasks save: ``python -m bench.batches``.

Two drains of JOBS jobs into a throwaway database, each by one ``jobq_worker`` process (``--concurrency``,
4 by default), started and warmed up before the clock starts. The work costs 5 ms per call plus 0.1 ms
per job (a provider's batch API): as single jobs (``bench.call_cost``: one call per job) and as a batch
task (``bench.call_cost_batch``: ``Batch(size=100, wait=0.05)``, one call per batch). Prints a table
with the ratio of the two drains; ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from bench import common
from bench.workflows import _env, measure


def run(env: dict[str, str], concurrency: int, logdir: Path, task: str, jobs: int) -> dict[str, Any]:
    from django_jobq.managers import NewJob
    from django_jobq.models import Job

    figures = measure(
        env,
        concurrency,
        logdir,
        task,
        jobs,
        lambda: Job.objects.enqueue_many(NewJob(task) for _ in range(jobs)),
    )
    figures.pop("enqueued")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=4, help="slots of the one worker process")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    name = f"{common.DB_PREFIX}batches_{secrets.token_hex(3)}"
    url = common.create_database(name)
    try:
        env = _env(url)
        os.environ.update(
            {k: env[k] for k in ("BENCH_SYSTEM", "BENCH_DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
        )
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", "--no-input", verbosity=0)
        results: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="bench-batches-") as logs:
            for label, task in (("single jobs", "bench.call_cost"), ("batch task", "bench.call_cost_batch")):
                results[label] = run(env, args.concurrency, Path(logs), task, args.jobs)
                print(f"{label}: {results[label]}", flush=True)
        from django.db import connections

        connections.close_all()
    finally:
        common.drop_database(name)
    ratio = results["batch task"]["drain_jobs_per_s"] / results["single jobs"]["drain_jobs_per_s"]
    print(f"\none jobq_worker process, --concurrency {args.concurrency}; 5 ms per call + 0.1 ms per job\n")
    print("| drain | jobs | drain (jobs/s) | end to end (jobs/s) |\n|---|---|---|---|")
    for label, f in results.items():
        print(
            f"| {label} | {f['jobs']:,} | {f['drain_jobs_per_s']:,.0f} | {f['end_to_end_jobs_per_s']:,.0f} |"
        )
    print(f"\nbatch task / single jobs: {ratio:.1f}x")
    if args.json is not None:
        args.json.write_text(
            json.dumps({"concurrency": args.concurrency, "results": results, "ratio": ratio})
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
