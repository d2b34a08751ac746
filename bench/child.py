"""One measurement of one system, in a fresh process (each system configures Django its own way):
``python -m bench.child SYSTEM OP --database URL --params JSON``; prints ``BENCH_RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from bench import common, fairness, memory
from bench.ratedrain import rate_drain
from bench.systems import SYSTEMS, System
from bench.systems.jobq import Jobq
from bench.systems.psycopg_ceiling import Psycopg

RESULT_MARK = "BENCH_RESULT "


def install(system: System, p: dict[str, Any]) -> dict[str, Any]:
    system.install()
    return {"ok": True}


def enqueue_single(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """W1: ``jobs`` enqueue calls, each its own transaction."""
    n, deadline = p["jobs"], p["deadline"]
    enqueue = system.enqueue_keyed if p.get("keyed") else system.enqueue  # type: ignore[attr-defined]
    system.open()
    for _ in range(20):
        enqueue()  # warm-up: connections, caches, prepared statements
    system.reset()
    if p.get("pending"):  # a PENDING backlog in the table (W1 backlog / W1 depth)
        with common.connect(system.db_url) as conn:
            system.insert_pending(conn, p["pending"])  # type: ignore[attr-defined]
            conn.execute("VACUUM ANALYZE jobq_job")
        if p.get("jobq"):
            from django_jobq.models import Job

            Job.objects.refresh_depths()  # what the reaper does every pass
    done = 0
    t0 = time.perf_counter()
    while done < n:
        enqueue()
        done += 1
        if done % 50 == 0 and time.perf_counter() - t0 > deadline:
            break
    elapsed = time.perf_counter() - t0
    _check_count(system, done + p.get("pending", 0))
    return _rate(done, elapsed, partial=done < n)


def enqueue_bulk(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """W1: ``jobs`` jobs in one call of the bulk API (psycopg: COPY, or executemany)."""
    n = p["jobs"]
    system.open()
    many = system.enqueue_executemany if p.get("executemany") else system.enqueue_bulk  # type: ignore[attr-defined]
    many(100)  # warm-up
    system.reset()
    t0 = time.perf_counter()
    many(n)
    elapsed = time.perf_counter() - t0
    _check_count(system, n)
    return _rate(n, elapsed)


def enqueue_parallel(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """W7: ``producers`` processes, each making single enqueue calls (one transaction each) for
    ``seconds``, no worker running; the jobs/s of all of them together. The processes are forked
    before any connection is opened and each opens its own."""
    producers, seconds = p["producers"], p["seconds"]
    ctx = multiprocessing.get_context("fork")
    warmed, start, counts = ctx.Barrier(producers + 1), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_produce, args=(system, seconds, warmed, start, counts), daemon=True)
        for _ in range(producers)
    ]
    for proc in procs:
        proc.start()
    warmed.wait(timeout=120)
    system.reset()  # the warm-up's jobs
    start.set()
    figures = [counts.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    if failed := [f for f in figures if isinstance(f, str)]:
        raise RuntimeError(f"a producer failed: {failed[0]}")
    done, elapsed = sum(f[0] for f in figures), max(f[1] for f in figures)
    _check_count(system, done)
    return {**_rate(done, elapsed), "producers": producers}


def _produce(system: System, seconds: float, warmed: Any, start: Any, counts: Any) -> None:
    try:
        system.open()
        for _ in range(20):
            system.enqueue()  # type: ignore[attr-defined]
    except BaseException as exc:
        warmed.abort()
        counts.put(f"{type(exc).__name__}: {exc}")
        return
    warmed.wait(timeout=120)
    start.wait(timeout=120)
    done, t0 = 0, time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            for _ in range(20):
                system.enqueue()  # type: ignore[attr-defined]
            done += 20
    except BaseException as exc:
        counts.put(f"{type(exc).__name__}: {exc}")
        return
    counts.put((done, time.perf_counter() - t0))


REFILLS = 3  # times a drain's batch is enqueued at most, when the workers finish it before the clock starts


def _analyze(conn: Any) -> None:
    """ANALYZE the tables the systems write (never the catalogues: quicker, and they plan nothing)."""
    tables = conn.execute(
        "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
        " WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
    ).fetchall()
    if tables:
        conn.execute(f"ANALYZE {', '.join(t[0] for t in tables)}")


def drain(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """W2/W5/W6: idle workers; ``jobs`` jobs committed at once; seconds until all are finished.

    fair drain: ``fair_keys``, the jobs spread over that many fairness keys (a fair queue).
    W5 variants (django-jobq): ``history`` rows DONE in the table beforehand (VACUUM ANALYZE'd), or a
    ``backlog`` of PENDING jobs committed together with the measured ones (the first ``jobs`` to finish
    are timed, so the backlog stays in the table throughout)."""
    n, concurrency, kind, deadline = p["jobs"], p["concurrency"], p["kind"], p["deadline"]
    history, backlog = p.get("history", 0), p.get("backlog", 0)
    system.reset()
    system.open()
    with common.connect(system.db_url) as poll, _workers(system, concurrency, p) as group:
        # The progress counts must not cost the server a table scan each (W5's tables are big).
        poll.execute("SET enable_seqscan = off")
        _warm_up(system, poll, concurrency, group)
        rss = _Rss(group)
        if history:
            assert isinstance(system, Jobq)
            system.insert_history(poll, history)
        if backlog:
            assert isinstance(system, Jobq)
            base = system.finished(poll)
            system.insert_pending(poll, backlog + n)

            def progress() -> int:
                return system.finished(poll) - base
        else:

            def progress() -> int:
                return n - system.remaining(poll)

        for _ in range(REFILLS):
            if p.get("fair_keys"):  # fair drain: the jobs spread over keys, in one commit
                fairness.enqueue_fair(n, p["fair_keys"], kind)
                _analyze(poll)
            elif not backlog:
                system.enqueue_batch(n, kind)
                # Fresh statistics, as autovacuum keeps them on a live queue table: without them some
                # systems' fetch queries plan badly on a table that was empty a moment ago. Jobs the
                # workers finish meanwhile are not counted (the clock starts after the ANALYZE).
                _analyze(poll)
            t0, start = time.perf_counter(), progress()
            if backlog or n - start >= n // 10:
                break
            # A loaded machine: the workers finished nearly all the batch before the clock started.
            # Drained, it is enqueued again: a figure is never read off a handful of jobs.
            while system.remaining(poll) and time.perf_counter() - t0 < deadline:
                time.sleep(0.01)
        done, checks, elapsed = start, 0, 0.0
        while done < n and elapsed <= deadline:
            # Poll sparsely while much is left (the count costs the server CPU), densely near the end.
            left = (n - done) / max((done - start) / elapsed, 1.0) if elapsed > 0.05 else 0.05
            time.sleep(min(0.1, max(0.003, left / 4)))
            done, elapsed = progress(), time.perf_counter() - t0
            checks += 1
            if checks % 20 == 0:
                group.check_alive()
            rss.halfway(done, start, n)
        rss.finish(done)
    result = _rate(min(done, n) - start, elapsed, partial=done < n)
    return {**result, "layout": system.describe(concurrency), **rss.figures()}


def latency(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """W3: idle workers; ``jobs`` jobs enqueued ``gap`` seconds apart; enqueue call -> function start."""
    n, gap, concurrency = p["jobs"], p["gap"], p["concurrency"]
    system.reset()
    system.open()
    path = Path(p["latency_file"])
    path.unlink(missing_ok=True)
    with common.connect(system.db_url) as poll, _workers(system, concurrency, p) as group:
        _warm_up(system, poll, concurrency, group)
        for key in range(-4, 0):  # the latency task itself once per slot, before measuring
            system.enqueue("latency", key)
            time.sleep(0.05)
        if not common.wait_for(lambda: len(_starts(path)) >= 4, 30, 0.02):
            raise RuntimeError(f"warm-up latency jobs did not run; {group.tail()}")
        time.sleep(0.5)
        enqueued: dict[int, float] = {}
        next_at = time.perf_counter()
        for key in range(n):
            enqueued[key] = time.time()
            system.enqueue("latency", key)
            next_at += gap
            time.sleep(max(0.0, next_at - time.perf_counter()))
        if not common.wait_for(lambda: sum(k >= 0 for k in _starts(path)) >= n, 30, 0.02):
            raise RuntimeError(f"only {sum(k >= 0 for k in _starts(path))} of {n} latency jobs started")
        starts = _starts(path)
        extra = {}
        if isinstance(system, Jobq):
            extra = {"db_clock_ms": _jobq_db_latency(poll)}
    path.unlink(missing_ok=True)
    values = [(starts[k] - enqueued[k]) * 1000 for k in range(n)]
    return {
        "p50": common.percentile(values, 50),
        "p95": common.percentile(values, 95),
        "p99": common.percentile(values, 99),
        "max": max(values),
        "jobs": n,
        "layout": system.describe(concurrency),
        **extra,
    }


def ceiling(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """W4: plain psycopg claim/finish loops in ``processes`` processes, ``batch`` jobs per claim."""
    assert isinstance(system, Psycopg)
    system.reset()
    system.open()
    elapsed = system.drain(p["jobs"], p["batch"], p["processes"])
    return {**_rate(p["jobs"], elapsed), "layout": f"{p['processes']} processes, batch {p['batch']}"}


def rate_limit(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """RL: django-jobq's TokenBucket/SlidingWindow.acquire() calls per second (no workers)."""
    assert isinstance(system, Jobq)
    system.reset()
    system.open()
    return system.acquire_rate(p["limiter"], p["threads"], p["keys"], p["seconds"])


OPS = {
    "install": install,
    "enqueue_single": enqueue_single,
    "enqueue_bulk": enqueue_bulk,
    "enqueue_parallel": enqueue_parallel,
    "drain": drain,
    "latency": latency,
    "ceiling": ceiling,
    "rate_limit": rate_limit,
    "rate_drain": rate_drain,
    "fair_claim": fairness.fair_claim,
}


# -- helpers ---------------------------------------------------------------------------------------
def _rate(jobs: int, seconds: float, *, partial: bool = False) -> dict[str, Any]:
    return {
        "rate": jobs / seconds if seconds > 0 else 0.0,
        "jobs": jobs,
        "seconds": seconds,
        "partial": partial,
    }


def _check_count(system: System, expected: int) -> None:
    with common.connect(system.db_url) as conn:
        found = system.remaining(conn)
    if found != expected:
        raise RuntimeError(f"expected {expected} queued jobs, found {found}")


class _workers:
    """Start the system's worker processes for ``concurrency``; stop them on exit."""

    def __init__(self, system: System, concurrency: int, p: dict[str, Any]):
        self.system, self.concurrency = system, concurrency
        env = {"BENCH_SLEEP_SECONDS": str(p.get("sleep_seconds", 0.05))}
        if p.get("latency_file"):
            env["BENCH_LATENCY_FILE"] = p["latency_file"]
        self.group = common.WorkerGroup(system.name, system.db_url, Path(p["logdir"]), env)

    def __enter__(self) -> common.WorkerGroup:
        try:
            for slots in self.system.layout(self.concurrency):
                self.group.env.update(self.system.worker_env(slots, self.concurrency))
                self.group.start(slots, self.concurrency)
            self.group.wait_ready()
        except BaseException:
            self.group.stop(grace=2)
            raise
        return self.group

    def __exit__(self, *exc: object) -> None:
        self.group.stop(grace=5)


class _Rss:
    """The workers' resident memory during a drain: after the warm-up, halfway through the measured
    jobs and at the end. Growth per job is taken over the second half, past one-off growth (caches,
    allocator arenas, connections) that the first jobs of a fresh worker cause."""

    def __init__(self, group: common.WorkerGroup):
        self.pids = [proc.pid for proc, _, _ in group.procs]
        self.warm = memory.group_rss(self.pids)
        self.mid: tuple[int, dict[str, int]] | None = None
        self.after: tuple[int, dict[str, int]] | None = None

    def halfway(self, done: int, start: int, n: int) -> None:
        if self.mid is None and done - start >= (n - start) / 2:
            self.mid = (done, memory.group_rss(self.pids))

    def finish(self, done: int) -> None:
        self.after = (done, memory.group_rss(self.pids))

    def figures(self) -> dict[str, Any]:
        if not self.warm["kb"] or self.after is None:
            return {}  # no /proc here
        done, after = self.after
        out: dict[str, Any] = {
            "rss_warm_mib": self.warm["kb"] / 1024,
            "rss_after_mib": after["kb"] / 1024,
            "rss_processes": after["processes"],
        }
        if self.mid is not None and done > self.mid[0]:
            out["rss_growth_per_job"] = (after["kb"] - self.mid[1]["kb"]) * 1024 / (done - self.mid[0])
        return out


def _warm_up(system: System, poll: Any, concurrency: int, group: common.WorkerGroup) -> None:
    """Run a few jobs through the started workers (imports, connections), then let them go idle.
    Their rows stay (finished): the workers are running, so the tables are not truncated now."""
    system.enqueue_batch(max(8, 2 * concurrency), "noop")
    if not common.wait_for(lambda: system.remaining(poll) == 0, 60, 0.02):
        group.check_alive()
        raise RuntimeError(f"warm-up jobs not finished within 60 s; {group.tail()}")
    time.sleep(0.3)


def _starts(path: Path) -> dict[int, float]:
    if not path.exists():
        return {}
    starts: dict[int, float] = {}
    for line in path.read_text().splitlines():
        key, _, at = line.partition(" ")
        if at:
            starts.setdefault(int(key), float(at))
    return starts


def _jobq_db_latency(conn: Any) -> dict[str, float]:
    """django-jobq's own view: started_at - created_at (both database-clock timestamps)."""
    row = conn.execute(
        """
        SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
                   ORDER BY extract(epoch FROM started_at - created_at) * 1000)
        FROM jobq_job WHERE task = 'bench.latency' AND (payload->>'key')::int >= 0
        """
    ).fetchone()
    return dict(zip(("p50", "p95", "p99"), row[0], strict=True)) if row and row[0] else {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.child")
    parser.add_argument("system", choices=sorted(SYSTEMS))
    parser.add_argument("op", choices=sorted(OPS))
    parser.add_argument("--database", required=True)
    parser.add_argument("--params", default="{}")
    args = parser.parse_args(argv)
    params = json.loads(args.params)
    if "jobq" in params:  # JOBQ settings of this workload, for this process and its workers
        os.environ["BENCH_JOBQ"] = json.dumps(params["jobq"])
    if params.get("kind") == "noop_capped":  # the capped task exists only for its own workload
        os.environ["BENCH_TASK_CAPS"] = "1"
    if params.get("task_rate"):  # the rate-limited task exists only for its own workload
        os.environ["BENCH_TASK_RATE"] = params["task_rate"]
    system = SYSTEMS[args.system](args.database)
    try:
        result = OPS[args.op](system, params)
    finally:
        system.close()
    print(RESULT_MARK + json.dumps(result), flush=True)
    os._exit(0)  # skip interpreter teardown (pools, loggers); everything is written


if __name__ == "__main__":
    main()
