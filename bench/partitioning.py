"""Retention at volume, one table against partitions: ``python -m bench.partitioning``.

A prototype, not part of the queue. Two layouts of the job table in a throwaway database, each holding
ROWS finished jobs spread over DAYS days and a backlog of PENDING jobs:

- ``single``: today's layout (one table, the partial claim, lease and finished indexes of jobq_job),
  pruned by the reaper's batched DELETE (PRUNE's shape: a batch from the finished index, deleted by
  primary key) until the oldest day is gone;
- ``partitioned``: the same columns partitioned by range on ``done_day`` (the day a job finished;
  'infinity' while it is unfinished, so active jobs live in one partition and a completion moves its row
  into its day's partition), pruned by DETACH PARTITION CONCURRENTLY and DROP TABLE of the oldest day.

While each prune runs, a claimer loops claim (FOR UPDATE SKIP LOCKED), complete and enqueue one job,
and its claim latencies are reported before, during and after the prune, with the prune's duration,
the WAL it wrote and the table's size and dead rows after it. ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench import common

COLUMNS = """
    id bigint NOT NULL DEFAULT nextval('job_id'),
    queue text NOT NULL DEFAULT 'default',
    payload jsonb NOT NULL,
    status smallint NOT NULL,
    priority smallint NOT NULL DEFAULT 100,
    run_at timestamptz NOT NULL DEFAULT now(),
    attempts int NOT NULL DEFAULT 0,
    fence bigint NOT NULL DEFAULT 0,
    worker_id text,
    lease_until timestamptz,
    result jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz"""

# The indexes of jobq_job the claim, the reaper and the prune read (models.py), on either layout.
INDEXES = """
CREATE INDEX {t}_claim ON {t} (queue, priority, run_at, id) WHERE status = 0;
CREATE INDEX {t}_lease ON {t} (lease_until) WHERE status = 1;
CREATE INDEX {t}_finished ON {t} (finished_at, status) INCLUDE (queue) WHERE status IN (2, 3, 4);
"""

AUTOVACUUM = """(autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000)"""

PAYLOAD = """jsonb_build_object('order_id', g, 'note', repeat('x', 80))"""
RESULT = """jsonb_build_object('ok', true)"""


@dataclass
class Layout:
    name: str
    table: str
    done: str  # the SET terms of a completion besides status
    fill_extra: str = ""  # extra column names of the fill
    fill_values: str = ""  # and their values
    prune_steps: list[str] = field(default_factory=list)


def _schema(conn: Any, days: int) -> None:
    conn.execute("CREATE SEQUENCE job_id")
    conn.execute(f"CREATE TABLE single ({COLUMNS}, PRIMARY KEY (id)) WITH {AUTOVACUUM}")
    for statement in INDEXES.format(t="single").strip().splitlines():
        conn.execute(statement)
    conn.execute(
        f"CREATE TABLE part ({COLUMNS}, done_day date NOT NULL DEFAULT 'infinity', PRIMARY KEY (id, done_day))"
        " PARTITION BY RANGE (done_day)"
    )
    conn.execute(
        f"CREATE TABLE part_active PARTITION OF part FOR VALUES FROM ('infinity') TO (MAXVALUE) WITH {AUTOVACUUM}"
    )
    for day in range(days + 2):  # the history, today, tomorrow
        conn.execute(
            f"CREATE TABLE part_d{day} PARTITION OF part FOR VALUES FROM "
            f"(current_date - {days - day}) TO (current_date - {days - day - 1}) WITH {AUTOVACUUM}"
        )
    for statement in INDEXES.format(t="part").strip().splitlines():
        conn.execute(statement)


def _fill(conn: Any, layout: Layout, rows: int, days: int, backlog: int) -> float:
    """ROWS DONE jobs finished over DAYS days (oldest first, as a queue writes them), then BACKLOG
    PENDING ones; vacuumed and analysed. The seconds it took."""
    started = time.monotonic()
    span = f"(interval '{days} days' * (g - 1) / {rows})"
    finished = f"date_trunc('day', now()) - interval '{days} days' + {span}"
    extra_cols = f", {layout.fill_extra}" if layout.fill_extra else ""
    extra_vals = f", ({finished})::date" if layout.fill_extra else ""
    step = 1_000_000
    for first in range(1, rows + 1, step):
        last = min(rows, first + step - 1)
        conn.execute(
            f"INSERT INTO {layout.table} (payload, status, attempts, fence, worker_id, result, created_at, "
            f"run_at, finished_at{extra_cols}) SELECT {PAYLOAD}, 2, 1, 1, 'w', {RESULT}, {finished}, "
            f"{finished}, {finished}{extra_vals} FROM generate_series({first}, {last}) AS g"
        )
    conn.execute(
        f"INSERT INTO {layout.table} (payload, status) SELECT {PAYLOAD}, 0 FROM generate_series(1, {backlog}) AS g"
    )
    conn.execute(f"VACUUM ANALYZE {layout.table}")
    if layout.table == "part":
        for (child,) in conn.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'part'::regclass"
        ).fetchall():
            conn.execute(f"VACUUM ANALYZE {child}")
    return time.monotonic() - started


class Claimer(threading.Thread):
    """claim -> complete -> enqueue, as fast as it goes, each claim's latency kept with its time."""

    def __init__(self, url: str, layout: Layout) -> None:
        super().__init__(daemon=True)
        self.url, self.layout = url, layout
        self.samples: list[tuple[float, float, float]] = []  # (start, claim seconds, cycle seconds)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        t = self.layout.table
        claim = f"""
WITH picked AS MATERIALIZED (
    SELECT id FROM {t} WHERE status = 0 AND queue = 'default' AND run_at <= now()
    ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
)
UPDATE {t} SET status = 1, worker_id = 'bench', attempts = attempts + 1, fence = fence + 1,
    lease_until = now() + interval '60 s'
WHERE id = ANY(ARRAY(SELECT id FROM picked)) RETURNING id, fence"""
        complete = f"""UPDATE {t} SET status = 2, {self.layout.done}, result = '{{"ok": true}}', lease_until = NULL
WHERE id = %s AND status = 1 AND worker_id = 'bench' AND fence = %s"""
        enqueue = f"INSERT INTO {t} (payload, status) VALUES ('{{\"order_id\": 1}}', 0)"
        try:
            with common.connect(self.url, prepare_threshold=0) as conn:
                while not self.stop.is_set():
                    begun = time.monotonic()
                    row = conn.execute(claim).fetchone()
                    claimed = time.monotonic()
                    if row is not None:
                        conn.execute(complete, row)
                    conn.execute(enqueue)
                    self.samples.append((begun, claimed - begun, time.monotonic() - begun))
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def window(self, start: float, end: float) -> dict[str, float]:
        inside = [s for s in self.samples if start <= s[0] < end]
        if not inside:
            return {"cycles": 0}
        claims = [s[1] * 1000 for s in inside]
        return {
            "cycles": len(inside),
            "cycles_per_s": round(len(inside) / max(end - start, 1e-9), 1),
            "claim_p50_ms": round(common.percentile(claims, 50), 2),
            "claim_p99_ms": round(common.percentile(claims, 99), 2),
            "claim_max_ms": round(max(claims), 2),
        }


def _wal(conn: Any) -> int:
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def _size(conn: Any, table: str) -> dict[str, Any]:
    if table == "part":
        total, dead, live = conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)), sum(s.n_dead_tup), sum(s.n_live_tup) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_stat_user_tables s ON s.relid = c.oid "
            "WHERE i.inhparent = 'part'::regclass"
        ).fetchone()
    else:
        total, dead, live = conn.execute(
            "SELECT pg_total_relation_size('single'), n_dead_tup, n_live_tup FROM pg_stat_user_tables "
            "WHERE relname = 'single'"
        ).fetchone()
    return {
        "size_mib": round(int(total) / 2**20, 1),
        "dead_rows": int(dead or 0),
        "live_rows": int(live or 0),
    }


def _prune(conn: Any, layout: Layout, cutoff_days: int, batch: int) -> int:
    """Remove the oldest day; the rows removed (a partition's counted first, outside the timing)."""
    if layout.table == "single":
        removed = 0
        while True:
            deleted = conn.execute(
                "DELETE FROM single WHERE id = ANY(ARRAY(SELECT id FROM single WHERE status = 2 "
                f"AND finished_at < date_trunc('day', now()) - interval '{cutoff_days} days' "
                "ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED)) AND status IN (2, 3, 4)",
                (batch,),
            ).rowcount
            removed += deleted
            if deleted == 0:
                return removed
    (count,) = conn.execute("SELECT count(*) FROM part_d0").fetchone()
    conn.execute("ALTER TABLE part DETACH PARTITION part_d0 CONCURRENTLY")
    conn.execute("DROP TABLE part_d0")
    return int(count)


def measure(rows: int, days: int, backlog: int, batch: int, settle: float) -> dict[str, Any]:
    name = f"{common.DB_PREFIX}partition_{secrets.token_hex(3)}"
    url = common.create_database(name)
    layouts = [
        Layout("single", "single", "finished_at = now()"),
        Layout("partitioned", "part", "finished_at = now(), done_day = current_date", fill_extra="done_day"),
    ]
    report: dict[str, Any] = {"rows": rows, "days": days, "backlog": backlog, "batch": batch}
    try:
        with common.connect(url) as conn:
            _schema(conn, days)
            for layout in layouts:
                figures: dict[str, Any] = {"fill_s": round(_fill(conn, layout, rows, days, backlog), 1)}
                figures["before"] = _size(conn, layout.table)
                claimer = Claimer(url, layout)
                claimer.start()
                time.sleep(settle)
                t0 = time.monotonic()
                wal = _wal(conn)
                removed = _prune(conn, layout, days - 1, batch)
                t1 = time.monotonic()
                figures["prune"] = {
                    "seconds": round(t1 - t0, 2), "removed": removed,
                    "wal_mib": round((_wal(conn) - wal) / 2**20, 1),
                }  # fmt: skip
                time.sleep(settle)
                claimer.stop.set()
                claimer.join()
                if claimer.error is not None:
                    raise claimer.error
                figures["claims_before"] = claimer.window(t0 - settle, t0)
                figures["claims_during"] = claimer.window(t0, t1)
                figures["claims_after"] = claimer.window(t1, t1 + settle)
                figures["after"] = _size(conn, layout.table)
                report[layout.name] = figures
                print(json.dumps({layout.name: figures}, indent=2), flush=True)
    finally:
        common.drop_database(name)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="finished jobs (default 10,000,000)")
    parser.add_argument("--days", type=int, default=10, help="days they span; the oldest is pruned")
    parser.add_argument("--backlog", type=int, default=20_000, help="PENDING jobs (default 20,000)")
    parser.add_argument("--batch", type=int, default=1_000, help="the DELETE's batch (JOBQ['PRUNE_BATCH'])")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds measured before and after")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    report = measure(args.rows, args.days, args.backlog, args.batch, args.settle)
    report["server"] = common.server_facts()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
