"""What workflows cost: ``python -m bench.workflows``.

Three drains of ``bench.noop`` jobs into a throwaway database, each by one ``jobq_worker`` process
(``--concurrency``, 4 by default: W2 c4's worker), started and warmed up (one job run) before the
clock starts:

- chain: a ``chain()`` of CHAIN jobs, each waiting for the one before (one job runnable at a time);
- group: a ``group()`` of GROUP members with a callback, which waits for every member;
- plain: W2-like, as many jobs as the group's members, no workflow (the comparison).

For each: the enqueue's time (one call), the drain's rate from the enqueue's commit to the last DONE,
and end to end (enqueue included); for the group, the time from its last member's DONE to the
callback's DONE; for the chain, the time per step. Times of the drain come from the database's
``finished_at`` (same host). Prints a table; ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common

ROOT = Path(__file__).resolve().parent.parent
TASK = "bench.noop"


def _env(url: str) -> dict[str, str]:
    return {
        **os.environ,
        "BENCH_SYSTEM": "jobq",
        "BENCH_DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONPATH": str(ROOT),
    }


class Worker:
    """One ``jobq_worker`` process on the benchmark database, stopped with SIGTERM."""

    def __init__(self, env: dict[str, str], concurrency: int, log: Path) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "jobq_worker", "--concurrency", str(concurrency)],
            env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"jobq_worker exited (code {self.proc.returncode}); see {self.log.name}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def _reset() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobq_job, jobq_dependency, jobq_workflow")
        cursor.execute("VACUUM ANALYZE jobq_job")
        cursor.execute("VACUUM ANALYZE jobq_dependency")


def _unfinished() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobq_job WHERE status IN (0, 1, 5)")
        return int(cursor.fetchone()[0])


def _wait_drained(worker: Worker, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _unfinished():
        worker.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{_unfinished()} jobs unfinished after {timeout} s")
        time.sleep(0.05)


def _finished_at(where: str = "TRUE") -> tuple[float, float, int]:
    """(first finished_at, last finished_at, DONE count) of the jobs ``where`` selects, epoch seconds."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM min(finished_at)), extract(epoch FROM max(finished_at)), count(*) "
            f"FROM jobq_job WHERE status = 2 AND {where}"
        )
        first, last, done = cursor.fetchone()
    return float(first), float(last), int(done)


def measure(
    env: dict[str, str], concurrency: int, logdir: Path, name: str, jobs: int, enqueue: Callable[[], Any]
) -> dict[str, Any]:
    """Start a warmed-up worker, then time ``enqueue()`` and the drain of the ``jobs`` it wrote."""
    from django_jobq.models import Job

    _reset()
    worker = Worker(env, concurrency, logdir / f"{name}.log")
    try:
        Job.objects.enqueue(TASK)  # the warm-up: the worker is up, connected and listening
        _wait_drained(worker, 60)
        _reset()
        began = time.time()
        enqueued = enqueue()
        committed = time.time()
        _wait_drained(worker, max(300.0, jobs / 20))
    finally:
        worker.stop()
    _, last, done = _finished_at()
    if done != jobs:
        raise RuntimeError(f"{name}: {done} of {jobs} jobs DONE")
    return {
        "jobs": jobs,
        "enqueue_s": round(committed - began, 3),
        "drain_jobs_per_s": round(jobs / (last - committed), 1),
        "end_to_end_jobs_per_s": round(jobs / (last - began), 1),
        "drain_s": round(last - committed, 3),
        "enqueued": enqueued,
    }


def run_chain(env: dict[str, str], concurrency: int, logdir: Path, n: int) -> dict[str, Any]:
    from django_jobq.workflows import Signature, chain

    step = Signature(TASK)
    figures = measure(env, concurrency, logdir, "chain", n, lambda: chain(*[step] * n).enqueue(name="bench"))
    figures.pop("enqueued")
    figures["per_step_ms"] = round(figures["drain_s"] / n * 1000, 2)
    return figures


def run_group(env: dict[str, str], concurrency: int, logdir: Path, n: int) -> dict[str, Any]:
    from django_jobq.workflows import Signature, group

    member = Signature(TASK)
    figures = measure(
        env, concurrency, logdir, "group", n + 1,
        lambda: group(*[member] * n, then=Signature(TASK)).enqueue(name="bench"),
    )  # fmt: skip
    callback = figures.pop("enqueued").job_ids[-1]
    _, members_done, _ = _finished_at(f"id <> {int(callback)}")
    _, callback_done, _ = _finished_at(f"id = {int(callback)}")
    figures["callback_after_last_member_ms"] = round((callback_done - members_done) * 1000, 1)
    return figures


def run_plain(env: dict[str, str], concurrency: int, logdir: Path, n: int) -> dict[str, Any]:
    from django_jobq.managers import NewJob
    from django_jobq.models import Job

    figures = measure(
        env, concurrency, logdir, "plain", n, lambda: Job.objects.enqueue_many(NewJob(TASK) for _ in range(n))
    )
    figures.pop("enqueued")
    return figures


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| workload | jobs | enqueue (s) | drain (jobs/s) | end to end (jobs/s) | note |",
        "|---|---|---|---|---|---|",
    ]
    for name, f in results.items():
        note = ""
        if "per_step_ms" in f:
            note = f"{f['per_step_ms']} ms per step"
        if "callback_after_last_member_ms" in f:
            note = f"callback DONE {f['callback_after_last_member_ms']} ms after the last member's"
        rows.append(
            f"| {name} | {f['jobs']:,} | {f['enqueue_s']:.3f} | {f['drain_jobs_per_s']:,.0f} | "
            f"{f['end_to_end_jobs_per_s']:,.0f} | {note} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chain", type=int, default=10_000, help="jobs in the chain")
    parser.add_argument("--group", type=int, default=10_000, help="members of the group (plus its callback)")
    parser.add_argument("--plain", type=int, default=None, help="jobs of the plain drain (default: --group)")
    parser.add_argument("--concurrency", type=int, default=4, help="slots of the one worker process")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    name = f"{common.DB_PREFIX}workflows_{secrets.token_hex(3)}"
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
        with tempfile.TemporaryDirectory(prefix="bench-workflows-") as logs:
            logdir = Path(logs)
            results["chain"] = run_chain(env, args.concurrency, logdir, args.chain)
            print(f"chain: {results['chain']}", flush=True)
            results["group + callback"] = run_group(env, args.concurrency, logdir, args.group)
            print(f"group: {results['group + callback']}", flush=True)
            plain = args.group if args.plain is None else args.plain
            results["plain (W2-like)"] = run_plain(env, args.concurrency, logdir, plain)
            print(f"plain: {results['plain (W2-like)']}", flush=True)
        from django.db import connections

        connections.close_all()
    finally:
        common.drop_database(name)
    print(f"\none jobq_worker process, --concurrency {args.concurrency}; bench.noop jobs\n")
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps({"concurrency": args.concurrency, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
