"""CPU-bound jobs on one worker process against several: ``python -m bench.processes``.

Enqueues JOBS jobs of pure-Python work (LOOPS iterations, about 20 ms each at the default) into a
throwaway database, then drains them with ``jobq_worker --burst --processes P`` for each P, in
alternating rounds, timing each drain from the command's start (process start-up included) to its
exit. Prints jobs/s per run and each P's median as a ratio to one process; ``--json FILE`` writes them.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import common

ROOT = Path(__file__).resolve().parent.parent


def _env(url: str) -> dict[str, str]:
    return {
        **os.environ,
        "BENCH_SYSTEM": "jobq",
        "BENCH_DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": str(ROOT),
    }


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "-m", "django", *args], env=env, cwd=ROOT, check=True,
                   capture_output=True, text=True)  # fmt: skip


def _enqueue(env: dict[str, str], jobs: int, loops: int) -> None:
    script = (
        "import django; django.setup()\n"
        "from django_jobq.managers import NewJob\n"
        "from django_jobq.models import Job\n"
        "Job.objects.all().delete()\n"
        f"Job.objects.enqueue_many(NewJob('bench.spin', {{'loops': {loops}}}) for _ in range({jobs}))\n"
    )
    subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True)


def _drained(env: dict[str, str], jobs: int) -> None:
    script = (
        "import django; django.setup()\n"
        "from django_jobq.models import Job, JobStatus\n"
        f"done = Job.objects.filter(status=JobStatus.DONE).count()\n"
        f"assert done == {jobs}, f'{{done}} of {jobs} jobs DONE'\n"
    )
    subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, check=True)


def drain(env: dict[str, str], processes: int, jobs: int, loops: int, slots: int) -> float:
    """Jobs per second of one drain by ``processes`` worker processes of ``slots`` slots each."""
    _enqueue(env, jobs, loops)
    began = time.perf_counter()
    _manage(env, "jobq_worker", "--burst", "--concurrency", str(slots), "--processes", str(processes))
    seconds = time.perf_counter() - began
    _drained(env, jobs)
    return jobs / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--loops", type=int, default=200_000, help="iterations of pure-Python work per job")
    parser.add_argument("--processes", default="1,2", help="comma-separated process counts (first: the base)")
    parser.add_argument("--slots", type=int, default=2, help="slots per worker process")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    name = f"{common.DB_PREFIX}processes_{secrets.token_hex(3)}"
    url = common.create_database(name)
    try:
        env = _env(url)
        _manage(env, "migrate", "--no-input")
        runs: dict[int, list[float]] = {n: [] for n in counts}
        for _ in range(args.rounds):
            for n in counts:
                rate = drain(env, n, args.jobs, args.loops, args.slots)
                runs[n].append(rate)
                print(f"--processes {n}: {rate:.1f} jobs/s", flush=True)
    finally:
        common.drop_database(name)
    base = statistics.median(runs[counts[0]])
    ratios = {n: statistics.median(r) / base for n, r in runs.items()}
    for n in counts:
        print(f"--processes {n}: median {statistics.median(runs[n]):.1f} jobs/s, {ratios[n]:.2f}x "
              f"--processes {counts[0]}")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps({"jobs": args.jobs, "loops": args.loops, "slots": args.slots,
                                         "runs": runs, "ratios": ratios}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
