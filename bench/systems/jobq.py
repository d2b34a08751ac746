"""django-jobq: Job.objects.enqueue / enqueue_many; the jobq_worker command (threads, LISTEN/NOTIFY)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections.abc import Callable
from typing import Any

from bench import common
from bench.systems.base import DjangoSystem, setup_django

TASKS = {
    "noop": "bench.noop",
    "sleep": "bench.sleep",
    "latency": "bench.latency",
    "noop_capped": "bench.noop_capped",  # FC task capped: @task(max_running=4)
}


class Jobq(DjangoSystem):
    name = "jobq"
    label = "django-jobq"
    distribution = "django-jobq"
    modules = ("django_jobq", "django")
    peer = False
    bulk_api = "Job.objects.enqueue_many"
    # Two counts, each matching a partial index's predicate (claim: PENDING; lease: RUNNING), so the
    # poll stays cheap however much history the table holds (status IN (0, 1) would scan it all).
    remaining_sql = "SELECT (SELECT count(*) FROM jobq_job WHERE status = 0) + (SELECT count(*) FROM jobq_job WHERE status = 1)"
    worker_note = "jobq_worker, threads; LISTEN/NOTIFY, 1 s poll"

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        from django_jobq.models import Job

        Job.objects.enqueue(TASKS[kind], {"key": key} if kind == "latency" else {})

    def enqueue_keyed(self) -> None:
        """W1 keyed: a job with a dedupe key no other job has."""
        from django_jobq.models import Job

        self._keys = getattr(self, "_keys", 0) + 1
        Job.objects.enqueue(TASKS["noop"], {}, dedupe_key=f"bench-key-{self._keys}")

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        from django_jobq.managers import NewJob
        from django_jobq.models import Job

        task = TASKS[kind]
        Job.objects.enqueue_many(NewJob(task, {}) for _ in range(n))

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        from django.core.management import call_command

        setup_django(self.name, self.db_url)
        ready()
        # RL drain reads the worker's own counters (claims, starts) from its metrics endpoint.
        port = os.environ.get("BENCH_METRICS_PORT")
        extra = ["--metrics-port", port, "--metrics-addr", "127.0.0.1"] if port else []
        call_command("jobq_worker", "--queues", f"default:{slots}", *extra)

    # -- W5: the same drain with a big table -----------------------------------------------------------
    def insert_history(self, conn: Any, rows: int) -> None:
        """``rows`` DONE jobs, as finished work leaves them, in one ``INSERT ... SELECT generate_series``;
        then VACUUM ANALYZE. From 5,000,000 rows on (W5 history 10M) the series is split in as many
        ranges as there are cores (at most 4), each one statement on its own connection, at once
        (10,000,000 rows on 2 cores: about 90 s in one statement, 65 s in two)."""
        parts = 1 if rows < 5_000_000 else max(1, min(4, os.cpu_count() or 1))
        bounds = [(i * rows // parts + 1, (i + 1) * rows // parts) for i in range(parts)]
        if parts == 1:
            _insert_done(conn, *bounds[0])
        else:
            with concurrent.futures.ThreadPoolExecutor(parts) as pool:
                for done in [pool.submit(self._insert_done_apart, lo, hi) for lo, hi in bounds]:
                    done.result()
        conn.execute("VACUUM ANALYZE jobq_job")
        # Flush the load's dirty pages now, as a table whose history built up over time would have them,
        # instead of during the measurement (needs superuser or pg_checkpoint; skipped without).
        with contextlib.suppress(Exception):
            conn.execute("CHECKPOINT")

    def _insert_done_apart(self, first: int, last: int) -> None:
        with common.connect(self.db_url) as conn:
            _insert_done(conn, first, last)

    def insert_pending(self, conn: Any, rows: int, task: str = "bench.noop") -> None:
        """``rows`` due PENDING jobs of ``task`` in one statement (and one notification, as
        enqueue_many sends)."""
        with conn.transaction():
            conn.execute(
                """
                INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts,
                                      max_attempts, errors, created_at)
                SELECT %s, 'default', '{}'::jsonb, 0, 100, now(), 0, 5, '[]'::jsonb, now()
                FROM generate_series(1, %s)
                """,
                [task, rows],
            )
            conn.execute("SELECT pg_notify('jobq', 'default')")

    def finished(self, conn: Any) -> int:
        """Jobs that have finished (the partial finished_at index; cheap while the history is empty)."""
        return int(conn.execute("SELECT count(*) FROM jobq_job WHERE finished_at IS NOT NULL").fetchone()[0])

    # -- RL: the rate-limit primitive --------------------------------------------------------------
    def acquire_rate(self, limiter: str, threads: int, keys: str, seconds: float) -> dict[str, Any]:
        """acquire() calls per second from ``threads`` threads for ``seconds``, on one key or a key per
        thread. "grant": a TokenBucket that never runs dry (every call takes a token: a row write and a
        commit); "refuse": an empty one (every call refused: a read, nothing written); "window": a
        SlidingWindow of 1,000 per second that never fills, so its log holds the last second's permits."""
        import threading
        import time
        import uuid

        from django_jobq.ratelimit import SlidingWindow, TokenBucket

        def make(i: int) -> TokenBucket | SlidingWindow:
            key = f"bench-{uuid.uuid4().hex[:8]}-{i if keys == 'each' else 0}"
            if limiter == "grant":
                return TokenBucket(key, rate=10**9, per=1, burst=10**9)
            if limiter == "refuse":
                return TokenBucket(key, rate=1, per=3600, burst=1)
            return SlidingWindow(key, limit=10_000, window=1.0)

        run = uuid.uuid4().hex[:8]
        limiters = [make(i) for i in range(threads)] if keys == "each" else [make(0)] * threads
        for each in limiters:  # warm-up: the pool's connections, the prepared statement, the rows
            for _ in range(20):
                each.acquire()
        counts = [0] * threads
        start = threading.Barrier(threads + 1)

        def loop(i: int) -> None:
            start.wait()
            n, acquire = 0, limiters[i].acquire
            while time.perf_counter() < stop:
                acquire()
                n += 1
            counts[i] = n

        workers = [threading.Thread(target=loop, args=(i,), name=f"rl-{run}-{i}") for i in range(threads)]
        for worker in workers:
            worker.start()
        stop = time.perf_counter() + seconds
        t0 = time.perf_counter()
        start.wait()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - t0
        return {
            "rate": sum(counts) / elapsed,
            "jobs": sum(counts),
            "seconds": elapsed,
            "partial": False,
            "unit": "calls/s",
            "layout": f"{threads} thread(s), {'a key each' if keys == 'each' else 'one key'}",
        }


def _insert_done(conn: Any, first: int, last: int) -> None:
    """DONE jobs ``first`` to ``last`` of the history, one a hundredth of a second older than the last."""
    conn.execute(
        """
        INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                              worker_id, result, errors, created_at, started_at, finished_at)
        SELECT 'bench.noop', 'default', '{}'::jsonb, 2, 100, t, 1, 5, 'history', 'null'::jsonb,
               '[]'::jsonb, t, t, t
        FROM (SELECT now() - make_interval(secs => g / 100.0) AS t
              FROM generate_series(%s::bigint, %s::bigint) AS g) AS s
        """,
        [first, last],
    )
