"""Plain psycopg, no framework: the practical limit of this machine for the same statements.

W1: one INSERT per job (autocommit), executemany and COPY for many. W4: processes that claim with a
MATERIALIZED CTE ``... FOR UPDATE SKIP LOCKED LIMIT n`` + ``UPDATE ... RETURNING`` and finish the
batch with one ``UPDATE ... WHERE id = ANY(...)``: two commits per batch, nothing else.

W3, the floor of a wake-up: the producer commits one ``INSERT`` + ``NOTIFY`` (one transaction, one
statement: ``pg_notify`` in the ``SELECT`` over the ``INSERT ... RETURNING``, as django-jobq does); one
worker process waits on ``LISTEN`` (psycopg's ``notifies()``, a ``select()`` on the connection with a
timeout), claims with W4's statement (``LIMIT 1``, the payload returned too) and notes the time as
the row comes back; then finishes the job and claims again until nothing is left.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any

from bench import common
from bench.systems.base import System

SCHEMA = """
CREATE TABLE bench_job (
    id bigserial PRIMARY KEY,
    task text NOT NULL,
    queue text NOT NULL DEFAULT 'default',
    payload jsonb NOT NULL DEFAULT '{}',
    status smallint NOT NULL DEFAULT 0,
    priority smallint NOT NULL DEFAULT 100,
    run_at timestamptz NOT NULL DEFAULT now(),
    attempts int NOT NULL DEFAULT 0,
    worker_id text,
    lease_until timestamptz,
    result jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz
);
CREATE INDEX bench_job_claim ON bench_job (queue, priority, run_at, id) WHERE status = 0;
"""

INSERT = "INSERT INTO bench_job (task, payload) VALUES (%s, %s::jsonb) RETURNING id"

CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT id FROM bench_job
    WHERE status = 0 AND queue = 'default' AND run_at <= now()
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE bench_job AS j
SET status = 1, worker_id = %(worker)s, attempts = j.attempts + 1, started_at = now(),
    lease_until = now() + interval '60 seconds'
FROM picked WHERE j.id = picked.id
RETURNING j.id
"""

# W3's floor: W4's claim, returning the payload too (the latency job's key).
CLAIM_PAYLOAD = CLAIM.replace("RETURNING j.id", "RETURNING j.id, j.payload")
CHANNEL = "bench_job"
INSERT_NOTIFY = f"""
WITH job AS (INSERT INTO bench_job (task, payload) VALUES (%s, %s::jsonb) RETURNING id)
SELECT id, pg_notify('{CHANNEL}', '') FROM job
"""
FLOOR_POLL = 1.0  # seconds the floor waits on LISTEN before claiming anyway (a safety net)

FINISH = """
UPDATE bench_job SET status = 2, result = 'null', finished_at = now(), lease_until = NULL
WHERE id = ANY(%(ids)s) AND status = 1 AND worker_id = %(worker)s
"""


class Psycopg(System):
    name = "psycopg"
    label = "plain psycopg"
    distribution = "psycopg"
    modules = ("psycopg",)
    peer = False
    bulk_api = "COPY"
    remaining_sql = "SELECT count(*) FROM bench_job WHERE status IN (0, 1)"

    conn: Any = None

    @classmethod
    def layout(cls, concurrency: int) -> list[int]:
        return [1]  # W3's floor: one process waiting on LISTEN, whatever the concurrency

    @classmethod
    def describe(cls, concurrency: int) -> str:
        return "1 process: LISTEN, select(), claim LIMIT 1 (the W3 floor)"

    def open(self) -> None:
        self.conn = common.connect(self.db_url)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def install(self) -> None:
        with common.connect(self.db_url) as conn:
            conn.execute(SCHEMA)

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        if kind == "latency":  # W3: INSERT + NOTIFY, one statement (one transaction, one round trip)
            self.conn.execute(INSERT_NOTIFY, ("bench.latency", json.dumps({"key": key})))
            return
        self.conn.execute(INSERT, ("bench.noop", "{}"))

    def enqueue_batch(self, n: int, kind: str = "noop") -> None:
        """W3's warm-up: ``n`` jobs copied and notified in one transaction."""
        with self.conn.transaction():
            with self.conn.cursor().copy("COPY bench_job (task) FROM STDIN") as copy:
                for _ in range(n):
                    copy.write_row((f"bench.{kind}",))
            self.conn.execute(f"NOTIFY {CHANNEL}")

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        with self.conn.transaction(), self.conn.cursor().copy("COPY bench_job (task) FROM STDIN") as copy:
            for _ in range(n):
                copy.write_row(("bench.noop",))

    def enqueue_executemany(self, n: int) -> None:
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO bench_job (task, payload) VALUES (%s, %s::jsonb)", [("bench.noop", "{}")] * n
            )

    def drain(self, jobs: int, batch: int, processes: int) -> float:
        """Seconds for ``processes`` claim/finish loops to empty a queue of ``jobs``."""
        self.enqueue_bulk(jobs)
        self.conn.execute("ANALYZE bench_job")
        ctx = multiprocessing.get_context("fork")
        start, ready = ctx.Event(), ctx.Barrier(processes + 1)
        procs = [
            ctx.Process(target=_claim_loop, args=(self.db_url, batch, start, ready), daemon=True)
            for _ in range(processes)
        ]
        for proc in procs:
            proc.start()
        ready.wait(timeout=60)
        t0 = time.perf_counter()
        start.set()
        for proc in procs:
            proc.join()
        elapsed = time.perf_counter() - t0
        if any(proc.exitcode for proc in procs):
            raise RuntimeError("a claim loop failed")
        left = self.remaining(self.conn)
        if left:
            raise RuntimeError(f"{left} jobs were left unfinished")
        return elapsed

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        """W3's floor: one process, whatever the concurrency (it claims one job per wake-up)."""
        from bench import work

        worker = f"floor-{os.getpid()}"
        params: dict[str, Any] = {"limit": 1, "worker": worker}
        with common.connect(self.db_url) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            ready()
            while True:
                while row := conn.execute(CLAIM_PAYLOAD, params).fetchone():
                    job_id, payload = row
                    if "key" in payload:  # the row is back: the moment this floor starts the job
                        work.record_start(payload["key"])
                    conn.execute(FINISH, {"ids": [job_id], "worker": worker})
                for _ in conn.notifies(timeout=FLOOR_POLL, stop_after=1):
                    pass


def _claim_loop(db_url: str, batch: int, start: Any, ready: Any) -> None:
    worker = f"ceiling-{os.getpid()}"
    with common.connect(db_url) as conn:
        conn.execute("SELECT 1")
        ready.wait()
        start.wait()
        params: dict[str, Any] = {"limit": batch, "worker": worker}
        while True:
            ids = [row[0] for row in conn.execute(CLAIM, params).fetchall()]
            if not ids:
                return
            conn.execute(FINISH, {"ids": ids, "worker": worker})
