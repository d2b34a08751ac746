"""RL drain: a drain under a rate limit (a queue's RATE_LIMIT, or a task's rate_limit), one of
bench.child's operations. It reads the worker's own counters from its metrics endpoint: the jobs its
claims took and the runs it started, so the claims spent on jobs it could not start show."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import common
from bench.systems import System
from bench.systems.jobq import Jobq

COUNTERS = ("jobq_claimed_jobs_total", "jobq_jobs_started_total", "jobq_rate_limit_refusals_total")


def rate_drain(system: System, p: dict[str, Any]) -> dict[str, Any]:
    """``jobs`` due jobs of a queue (a task, with ``task_rate``) limited to ``rate`` a second, drained
    by one worker of ``concurrency`` slots. The bucket starts full (``rate`` permits) and may hand out
    at most ``rate`` more a second, so the rate is (jobs done - rate) / seconds from the enqueue to the
    last job: the limit itself at best (1.00x), whatever the first burst's timing. Claims per run:
    jobs the worker's claims took per run it started, over the drain only (a run a rate limit refused
    is a claim given back)."""
    assert isinstance(system, Jobq)
    n, rate, concurrency = p["jobs"], p["rate"], p["concurrency"]
    task = "bench.noop_limited" if p.get("task_rate") else "bench.noop"
    port = _free_port()
    system.reset()
    system.open()
    group = common.WorkerGroup(
        system.name, system.db_url, Path(p["logdir"]), {"BENCH_METRICS_PORT": str(port)}
    )
    with common.connect(system.db_url) as poll:
        try:
            group.start(concurrency, concurrency)
            group.wait_ready()
            system.enqueue_batch(8, "noop")  # warm-up: imports, connections
            if not common.wait_for(lambda: system.remaining(poll) == 0, 60, 0.02):
                raise RuntimeError(f"warm-up jobs not finished within 60 s; {group.tail()}")
            time.sleep(0.3)  # the bucket refills what the warm-up took
            before = _counters(port)
            base = system.finished(poll)
            system.insert_pending(poll, n, task)
            t0, done, checks = time.perf_counter(), 0, 0
            while done < n and time.perf_counter() - t0 <= 30 + 2 * n / rate:
                time.sleep(0.02)
                done = system.finished(poll) - base
                checks += 1
                if checks % 50 == 0:
                    group.check_alive()
            seconds = time.perf_counter() - t0
            time.sleep(0.5)  # the last runs' counts
            after = _counters(port)
        finally:
            group.stop(grace=5)
    if done <= rate:
        raise RuntimeError(f"{done} of {n} jobs done in {seconds:.0f} s: none past the first burst")
    claims, runs = (after[c] - before[c] for c in COUNTERS[:2])
    return {
        "rate": (done - rate) / seconds,
        "jobs": done,
        "seconds": seconds,
        "partial": done < n,
        "limit": rate,
        "runs": runs,
        "claims": claims,
        "claims_per_run": claims / runs if runs else None,
        "refusals": after[COUNTERS[2]] - before[COUNTERS[2]],
        "layout": f"{system.describe(concurrency)}, metrics on",
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _counters(port: int) -> dict[str, float]:
    """The worker's COUNTERS, each summed over its labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals
