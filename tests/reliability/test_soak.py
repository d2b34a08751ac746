"""Soak: thirty minutes at ~70% of the measured capacity with a transaction held open for five
minutes in the middle (it holds back vacuum's horizon: dead rows pile up in jobq_job). The figures,
claim latency p99 before / during / after and over the first and last five minutes, dead tuples and
table + index size over time, and the time to recover, go to docs/reliability.md. Autovacuum is on for
the run, even on a server that has it off. Marker ``soak``: run by ``tox -e soak`` only.

JOBQ_SOAK_SECONDS shortens the run (the open transaction lasts a sixth of it, in the middle)."""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import threading
import time
from dataclasses import dataclass

import psycopg
import pytest
from django.db import connection, connections

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, WorkerRecord
from tests.conftest import ROOT, wait_until
from tests.testapp.models import Ledger

from .support import Processes, percentile, report, sql

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.soak,
    pytest.mark.django_db(transaction=True),
]

SECONDS = float(os.environ.get("JOBQ_SOAK_SECONDS") or 1800)
HOLD = SECONDS / 6  # the open transaction: 5 minutes of 30
LOAD = 0.7  # of the measured capacity
WORKERS, SLOTS, JOB_MS = 2, 4, 5
CAPACITY_JOBS = 2000
ENV = {"JOBQ_LEASE_SECONDS": "30", "JOBQ_HEARTBEAT_SECONDS": "2", "JOBQ_POLL_INTERVAL": "0.5"}
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- soak figures: begin -->", "<!-- soak figures: end -->"


@pytest.fixture
def autovacuum_on():
    """The soak measures the table as autovacuum keeps it: a server with autovacuum off (some
    development servers) gets it on for the run (ALTER SYSTEM, a reload; no restart) and back after.
    Yields what the run saw: "on", or "on for the run (the server has it off)"."""
    if sql("SHOW autovacuum")[0][0] == "on":
        yield "on"
        return
    with connection.cursor() as cursor:
        cursor.execute("ALTER SYSTEM SET autovacuum = on")
        cursor.execute("SELECT pg_reload_conf()")
    wait_until(lambda: sql("SHOW autovacuum")[0][0] == "on", message="autovacuum on after the reload")
    try:
        yield "on for the run (the server has it off)"
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER SYSTEM RESET autovacuum")
            cursor.execute("SELECT pg_reload_conf()")


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds since the start of the steady load
    dead: int
    live: int
    table_bytes: int
    index_bytes: int
    vacuums: int  # autovacuum and vacuum runs of jobq_job so far


def _sample(t0: float) -> Sample:
    dead, live, vacuums = sql(
        "SELECT n_dead_tup, n_live_tup, autovacuum_count + vacuum_count FROM pg_stat_user_tables"
        " WHERE relname = 'jobq_job'"
    )[0]
    table, index = sql("SELECT pg_table_size('jobq_job'), pg_indexes_size('jobq_job')")[0]
    return Sample(round(time.monotonic() - t0, 1), dead, live, table, index, vacuums)


def _latencies(since: dt.datetime, lo: float, hi: float, t0: dt.datetime) -> list[float]:
    """Claim latency (started_at - run_at, seconds) of the jobs due between lo and hi seconds after t0."""
    rows = sql(
        "SELECT extract(epoch FROM started_at - run_at) FROM jobq_job WHERE task = 'test.ledger'"
        " AND started_at IS NOT NULL AND run_at >= %s AND run_at >= %s AND run_at < %s",
        [since, t0 + dt.timedelta(seconds=lo), t0 + dt.timedelta(seconds=hi)],
    )
    return [float(r[0]) for r in rows]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def _mib(value: int) -> float:
    return round(value / 2**20, 1)


def _write_doc(figures: dict, samples: list[Sample]) -> None:
    step = max(1, len(samples) // 12)
    rows = "\n".join(
        f"| {s.at:.0f} | {s.dead} | {s.live} | {_mib(s.table_bytes)} | {_mib(s.index_bytes)} | {s.vacuums} |"
        for s in samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else [])
    )
    f = figures
    peak = f["dead_tuples_peak"]
    text = f"""{BEGIN}
Run of {f["date"]}: {f["seconds"]:.0f} s of steady load{" (a shortened run)" if f["seconds"] < 1800 else ""},
{WORKERS} workers x {SLOTS} slots, jobs of {JOB_MS} ms; capacity measured at {f["capacity_jobs_per_s"]} jobs/s,
load {f["rate_jobs_per_s"]} jobs/s ({LOAD:.0%}); a transaction holding an xid open for {f["hold_s"]:.0f} s
from {f["hold_from_s"]:.0f} s.

| claim latency (started_at - run_at) | p50 ms | p99 ms | jobs |
|---|---|---|---|
| before the open transaction | {f["claim_ms"]["before"]["p50"]} | {f["claim_ms"]["before"]["p99"]} | {f["claim_ms"]["before"]["n"]} |
| while it is open | {f["claim_ms"]["during"]["p50"]} | {f["claim_ms"]["during"]["p99"]} | {f["claim_ms"]["during"]["n"]} |
| after it ends | {f["claim_ms"]["after"]["p50"]} | {f["claim_ms"]["after"]["p99"]} | {f["claim_ms"]["after"]["n"]} |

Claim p99 over the first {f["edge_s"]:.0f} s: {f["claim_p99_ms_first_last"]["first"]} ms; over the last
{f["edge_s"]:.0f} s: {f["claim_p99_ms_first_last"]["last"]} ms. Autovacuum: {f["autovacuum"]}.
Recovery after the transaction ends: claim p99 (5-second windows) back within 1.5 x the before
figure after {f["claim_recovered_after_s"]} s; the first vacuum of jobq_job after it
{f["first_vacuum_after_hold_s"]} s, dead tuples then {f["dead_tuples_after_first_vacuum"]} (None: not
within the run). Dead tuples at their peak: {peak["before"]} before, {peak["during"]} during, {peak["after"]} after. Table + indexes:
{f["size_mib"]["start"]} MiB at the start, {f["size_mib"]["end"]} MiB at the end (nothing is pruned
within the DONE retention of 7 days). Jobs lost: {f["lost"]}; run twice: {f["run_twice"]}.

| t (s) | dead tuples | live tuples | table MiB | indexes MiB | vacuums so far |
|---|---|---|---|---|---|
{rows}
{END}"""
    doc = DOC.read_text()
    DOC.write_text(re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: text, doc, flags=re.S))


@pytest.mark.p1
def test_soak_at_seventy_percent_with_a_long_open_transaction(processes: Processes, autovacuum_on: str):
    processes.env = ENV
    for n in range(WORKERS):
        processes.worker(f"soak{n}", "--concurrency", str(SLOTS))
    processes.start("reaper", "jobq_reap")
    # Capacity: a backlog, drained by the same workers, timed from when both are up (not their start).
    wait_until(lambda: WorkerRecord.objects.filter(worker_id__startswith="soak", stopped_at=None).count() == WORKERS,
               timeout=120, message="the workers up")  # fmt: skip
    since = sql("SELECT now()")[0][0]
    started = time.monotonic()
    Job.objects.enqueue_many(NewJob("test.ledger", {"ms": JOB_MS}) for _ in range(CAPACITY_JOBS))
    wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == CAPACITY_JOBS, timeout=600,
               interval=0.2, message="the capacity backlog drained")  # fmt: skip
    capacity = CAPACITY_JOBS / (time.monotonic() - started)
    rate = LOAD * capacity
    since = sql("SELECT now()")[0][0]

    stopping = threading.Event()
    produced: list[int] = []

    def produce() -> None:
        try:
            tick, owed = 0.1, 0.0
            while not stopping.wait(tick):
                owed += rate * tick
                n, owed = int(owed), owed - int(owed)
                if n:
                    produced.extend(
                        Job.objects.enqueue_many(NewJob("test.ledger", {"ms": JOB_MS}) for _ in range(n))
                    )
        finally:
            connections.close_all()

    samples: list[Sample] = []
    t0 = time.monotonic()
    t0_db = sql("SELECT now()")[0][0]
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    hold_from = (SECONDS - HOLD) / 2
    holder = None
    every = max(1.0, SECONDS / 120)
    try:
        while (elapsed := time.monotonic() - t0) < SECONDS:
            samples.append(_sample(t0))
            if holder is None and elapsed >= hold_from:
                db = connection.settings_dict
                holder = psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432,
                                         dbname=db["NAME"], user=db["USER"] or "postgres")  # fmt: skip
                holder.execute("SELECT txid_current(), count(*) FROM jobq_job")  # opens; holds the horizon
                hold_began = elapsed
            if holder is not None and not holder.closed and elapsed >= hold_from + HOLD:
                holder.rollback()
                holder.close()
                hold_ended = elapsed
            time.sleep(every)
    finally:
        stopping.set()
        producer.join(30)
        if holder is not None and not holder.closed:
            holder.close()
    wait_until(lambda: Job.objects.filter(id__in=produced).exclude(status=JobStatus.DONE).count() == 0,
               timeout=300, interval=0.5, message="the steady load drained")  # fmt: skip
    samples.append(_sample(t0))
    processes.stop_all()

    windows = {"before": (0, hold_began), "during": (hold_began, hold_ended), "after": (hold_ended, SECONDS)}
    claims = {name: _latencies(since, lo, hi, t0_db) for name, (lo, hi) in windows.items()}
    before_p99 = percentile(claims["before"], 99)
    claim_recovered = None
    for start in range(math.ceil(hold_ended), int(SECONDS), 5):
        window = _latencies(since, start, start + 5, t0_db)
        if window and before_p99 is not None and percentile(window, 99) <= 1.5 * before_p99:
            claim_recovered = round(start - hold_ended, 1)
            break
    edge = min(300.0, SECONDS / 6)  # the first and the last five minutes of 30
    edges = {
        "first": _latencies(since, 0, edge, t0_db),
        "last": _latencies(since, SECONDS - edge, SECONDS, t0_db),
    }
    peak_before = max((s.dead for s in samples if s.at < hold_began), default=0)
    at_end = next(s for s in samples if s.at >= hold_ended)
    vacuumed = next((s for s in samples if s.at >= hold_ended and s.vacuums > at_end.vacuums), None)
    runs = Ledger.objects.filter(job_id__in=produced).count()
    figures = report(
        "soak",
        date=dt.date.today().isoformat(),
        seconds=SECONDS,
        hold_s=round(hold_ended - hold_began, 1),
        hold_from_s=round(hold_began, 1),
        capacity_jobs_per_s=round(capacity, 1),
        rate_jobs_per_s=round(rate, 1),
        jobs=len(produced),
        lost=Job.objects.filter(id__in=produced).exclude(status=JobStatus.DONE).count(),
        run_twice=runs - len(produced),
        claim_ms={
            name: {"n": len(v), "p50": _ms(percentile(v, 50)), "p99": _ms(percentile(v, 99))}
            for name, v in claims.items()
        },
        claim_recovered_after_s=claim_recovered,
        edge_s=edge,
        claim_p99_ms_first_last={name: _ms(percentile(v, 99)) for name, v in edges.items()},
        autovacuum=autovacuum_on,
        dead_tuples_peak={
            "before": peak_before,
            "during": max((s.dead for s in samples if hold_began <= s.at < hold_ended), default=0),
            "after": max((s.dead for s in samples if s.at >= hold_ended), default=0),
        },
        first_vacuum_after_hold_s=None if vacuumed is None else round(vacuumed.at - hold_ended, 1),
        dead_tuples_after_first_vacuum=None if vacuumed is None else vacuumed.dead,
        size_mib={
            "start": _mib(samples[0].table_bytes + samples[0].index_bytes),
            "end": _mib(samples[-1].table_bytes + samples[-1].index_bytes),
        },
    )
    _write_doc(figures, samples)
    assert figures["lost"] == 0
    assert figures["run_twice"] == 0  # no fault in a soak: every job ran once
    assert all(claims.values()), "a phase of the soak claimed nothing"
