"""django-jobq on each engine, as a developer sees it locally: W1 single (enqueue calls, each its own
transaction), W2 c4 (a committed batch drained by a 4-slot worker in this process) and W3 (enqueue
call -> the task's start, p50/p95, the worker idle in this process). SQLite on a temporary file;
PostgreSQL only with --postgres, on a throwaway database (every job in it is deleted).

    python -m bench.engines [--jobs N] [--latency-jobs N] [--postgres postgres://.../jobq_bench_engines]

Not part of ``python -m bench`` (its workers are separate processes on a PostgreSQL server): the
figures here are one process's, for comparing the two engines with each other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def measure(jobs: int, latency_jobs: int) -> dict[str, Any]:
    """In a process configured for one engine (tests.settings or tests.settings.sqlite)."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from django_jobq.managers import NewJob
    from django_jobq.models import Job
    from django_jobq.worker import Worker

    call_command("migrate", verbosity=0)
    Job.objects.all().delete()
    t0 = time.perf_counter()
    for _ in range(jobs):
        Job.objects.enqueue("test.noop")
    w1 = jobs / (time.perf_counter() - t0)
    Job.objects.all().delete()
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(jobs))
    t0 = time.perf_counter()
    drained = Worker({"default": 4}, burst=True)
    drained.run()
    w2 = drained.processed / (time.perf_counter() - t0)
    Job.objects.all().delete()
    idle = Worker({"default": 4}, poll_interval=1.0)
    thread = threading.Thread(target=idle.run, daemon=True)
    thread.start()
    time.sleep(1.0)
    ids = []
    for _ in range(latency_jobs):
        ids.append(Job.objects.enqueue("test.noop"))
        time.sleep(0.02)
    deadline = time.monotonic() + 60
    while Job.objects.filter(id__in=ids, status=2).count() < len(ids) and time.monotonic() < deadline:
        time.sleep(0.05)
    idle.stop()
    thread.join(timeout=30)
    waits = sorted(
        (job.started_at - job.created_at).total_seconds() * 1000
        for job in Job.objects.filter(id__in=ids, started_at__isnull=False)
    )
    return {
        "engine": connection.vendor,
        "W1 single jobs/s": round(w1),
        "W2 c4 jobs/s": round(w2),
        "W3 p50 ms": round(statistics.median(waits), 1),
        "W3 p95 ms": round(waits[max(0, int(0.95 * len(waits)) - 1)], 1),
    }


def _child(settings: str, extra: dict[str, str], jobs: int, latency_jobs: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update({"DJANGO_SETTINGS_MODULE": settings, "PYTHONPATH": str(ROOT), **extra})
    args = [sys.executable, "-m", "bench.engines", "--child", "--jobs", str(jobs)]
    done = subprocess.run(
        [*args, "--latency-jobs", str(latency_jobs)], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        return {"engine": settings, "error": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engines", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency-jobs", type=int, default=50)
    parser.add_argument("--postgres", metavar="URL", help="also a throwaway PostgreSQL database (emptied)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.jobs, args.latency_jobs)))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = {"JOBQ_SQLITE_PATH": str(Path(tmp) / "bench.sqlite3")}
        rows.append(_child("tests.settings.sqlite", path, args.jobs, args.latency_jobs))
    if args.postgres:
        rows.append(_child("tests.settings", {"DATABASE_URL": args.postgres}, args.jobs, args.latency_jobs))
    for row in rows:
        print("  ".join(f"{k}: {v}" for k, v in row.items()))
    return 0 if all("error" not in row for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
