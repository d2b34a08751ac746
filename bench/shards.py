"""Queues on several PostgreSQL servers (django_jobq.shards): ``python -m bench.shards``.

Against the local PostgreSQL (the home database, a throwaway database on it) and two throwaway
servers of their own (bench/pgserver.py), in one process:

- enqueue: ENQUEUES single enqueues, each in a transaction of its own on the home database, to a queue
  of the home database (the job in that transaction), to a shard's queue (through the outbox: its
  id reserved on the shard, its row in the transaction, relayed after the commit), and to a shard's
  queue outside any transaction (written on the shard directly);
- the same enqueue to the home queue with JOBQ["SHARDS"] unset (the base of the enqueue ratios);
- drain: a burst worker (one lane of 4 slots per database, a worker per database in one process)
  draining JOBS no-op jobs spread evenly over 1, 2 and 3 databases, and over 1 with JOBQ["SHARDS"]
  configured but unused.

Each figure is the median of RUNS runs; ratios are against the home-database figure. ``--json FILE``
writes the figures. The machine's cores bound the drain: on 2 cores three databases share them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench import common, pgserver

HOME = "jobq_bench_shards"
SHARDS = {"jobs2": 1, "jobs3": 2}
QUEUES = {"q2": {"DATABASE": "jobs2"}, "q3": {"DATABASE": "jobs3"}}


def _configure(servers: dict[str, pgserver.PgServer]) -> None:
    import django
    from django.conf import settings

    url = common.parse_url(common.database_url(HOME))

    def alias(port: int, name: str) -> dict[str, Any]:
        return {
            "ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": url["user"],
            "PASSWORD": url["password"] or "", "HOST": url["host"], "PORT": str(port), "CONN_MAX_AGE": None,
        }  # fmt: skip

    databases = {"default": alias(url["port"], HOME)}
    for name, server in servers.items():
        databases[name] = {**alias(server.port, "jobq_shard"), "HOST": "127.0.0.1", "USER": "postgres"}
    settings.configure(
        SECRET_KEY="benchmark-only", USE_TZ=True, DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        DATABASES=databases, DATABASE_ROUTERS=["django_jobq.routers.JobqRouter"],
        INSTALLED_APPS=["django.contrib.contenttypes", "django_jobq", "bench.jobqapp"],
        JOBQ={"SHARDS": SHARDS, "QUEUES": QUEUES, "LEASE_SECONDS": 30, "HEARTBEAT_SECONDS": 5},
        LOGGING={"version": 1, "disable_existing_loggers": False},
    )  # fmt: skip
    django.setup()


def _enqueues(n: int, queue: str, in_transaction: bool) -> float:
    from django.db import transaction

    from django_jobq.models import Job

    started = time.perf_counter()
    for _ in range(n):
        if in_transaction:
            with transaction.atomic():
                Job.objects.enqueue("bench.noop", queue=queue)
        else:
            Job.objects.enqueue("bench.noop", queue=queue)
    return n / (time.perf_counter() - started)


def _drain(jobs: int, queues: list[str]) -> float:
    import threading

    from django_jobq.managers import NewJob
    from django_jobq.models import Job
    from django_jobq.worker import Worker
    from django_jobq.worker.group import WorkerGroup
    from django_jobq.worker.lanes import lanes_by_database

    for queue in queues:
        Job.objects.enqueue_many([NewJob("bench.noop", queue=queue) for _ in range(jobs // len(queues))])
    group = WorkerGroup(
        lanes_by_database(dict.fromkeys(queues, 4)),
        lambda lanes, worker_id: Worker(lanes, worker_id=worker_id, burst=True, poll_interval=0.05),
    )
    thread = threading.Thread(target=group.run)
    started = time.perf_counter()
    thread.start()
    thread.join()
    return group.processed / (time.perf_counter() - started)


def _clean() -> None:
    from django.db import connections

    for alias in ("default", *SHARDS):
        with connections[alias].cursor() as cursor:
            cursor.execute("TRUNCATE jobq_job, jobq_outbox, jobq_worker CASCADE")
            cursor.execute("VACUUM ANALYZE jobq_job")


def run(jobs: int, enqueues: int, runs: int) -> dict[str, Any]:
    from django.core.management import call_command
    from django.test import override_settings

    for alias in ("default", *SHARDS):
        call_command("migrate", database=alias, verbosity=0)

    from django.conf import settings

    unsharded = {k: v for k, v in settings.JOBQ.items() if k not in ("SHARDS", "QUEUES")}

    def no_shards(measure: Any) -> Any:
        def run() -> float:
            with override_settings(JOBQ=unsharded):
                return float(measure())

        return run

    def medians(measures: dict[str, Any]) -> dict[str, float]:
        """Each measure RUNS times, the rounds interleaved (drift hits every figure alike)."""
        figures: dict[str, list[float]] = {name: [] for name in measures}
        for _ in range(runs):
            for name, measure in measures.items():
                _clean()
                figures[name].append(measure())
        return {name: round(statistics.median(values), 1) for name, values in figures.items()}

    enqueue = medians({
        "home queue, in the transaction": lambda: _enqueues(enqueues, "default", True),
        "shard queue, through the outbox": lambda: _enqueues(enqueues, "q2", True),
        "shard queue, no transaction": lambda: _enqueues(enqueues, "q2", False),
        "home queue, in the transaction, no SHARDS": no_shards(lambda: _enqueues(enqueues, "default", True)),
    })  # fmt: skip
    drain = medians({
        "1 database, no SHARDS": no_shards(lambda: _drain(jobs, ["default"])),
        "1 database": lambda: _drain(jobs, ["default"]),
        "2 databases": lambda: _drain(jobs, ["default", "q2"]),
        "3 databases": lambda: _drain(jobs, ["default", "q2", "q3"]),
    })  # fmt: skip
    return {
        "jobs": jobs, "enqueues": enqueues, "runs": runs,
        "enqueue_per_second": enqueue, "drain_jobs_per_second": drain,
        "enqueue_ratio": {
            k: round(v / enqueue["home queue, in the transaction, no SHARDS"], 2) for k, v in enqueue.items()
        },
        "drain_ratio": {k: round(v / drain["1 database, no SHARDS"], 2) for k, v in drain.items()},
        "server": common.server_facts(),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=12_000, help="jobs per drain (spread over its databases)")
    parser.add_argument("--enqueues", type=int, default=2_000, help="enqueues per enqueue figure")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (the median is kept)")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON")
    args = parser.parse_args()
    servers = {name: pgserver.PgServer(name) for name in SHARDS}
    common.create_database(HOME)
    try:
        for server in servers.values():
            server.create("jobq_shard", durable=True)  # as the home server: fsync, synchronous_commit
        _configure(servers)
        figures = run(args.jobs, args.enqueues, args.runs)
    finally:
        from django.db import connections

        connections.close_all()
        for server in servers.values():
            server.remove()
        common.drop_database(HOME)
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
