"""Shared plumbing: the server address, throwaway databases, sizes, statistics, worker processes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DB_PREFIX = "jobq_bench_"  # every database this suite creates (and drops) starts with this
RL_DRAIN_RATE = 200  # RL drain: the queue's (the task's) rate limit, jobs a second


# -- the server ------------------------------------------------------------------------------------
def server_url() -> str:
    return os.environ.get("DATABASE_URL") or DEFAULT_URL


def parse_url(url: str) -> dict[str, Any]:
    """postgres://user:password@host:port/name -> psycopg connection keywords."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be a postgres:// URL, not {url!r}")
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 5432,
        "user": unquote(parts.username) if parts.username else "postgres",
        "password": unquote(parts.password) if parts.password else None,
        "dbname": unquote(parts.path.lstrip("/")) or "postgres",
    }


def database_url(name: str, base: str | None = None) -> str:
    """The URL of database ``name`` on the server of ``base`` (default: DATABASE_URL)."""
    parts = urlsplit(base or server_url())
    return parts._replace(path="/" + name, query="", fragment="").geturl()


def connect(url: str, **kwargs: Any) -> Any:
    import psycopg

    params = {k: v for k, v in parse_url(url).items() if v is not None}
    return psycopg.connect(**params, autocommit=True, **kwargs)


def conninfo(url: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(**{k: str(v) for k, v in parse_url(url).items() if v is not None})


def create_database(name: str) -> str:
    if not name.startswith(DB_PREFIX) or not name.replace("_", "").isalnum():
        raise ValueError(f"refusing to create {name!r}: benchmark databases are named {DB_PREFIX}*")
    import psycopg

    with connect(database_url("postgres")) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for attempt in range(10):
            try:
                conn.execute(f'CREATE DATABASE "{name}"')
                break
            except psycopg.errors.ObjectInUse:
                # Another client is connected to template1 (e.g. a test suite creating its own
                # database at this moment): try again shortly.
                if attempt == 9:
                    raise
                time.sleep(0.5)
    return database_url(name)


def drop_database(name: str) -> None:
    if not name.startswith(DB_PREFIX):
        raise ValueError(f"refusing to drop {name!r}")
    with connect(database_url("postgres")) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def server_facts() -> dict[str, str]:
    with connect(database_url("postgres")) as conn:
        facts = {"postgresql": conn.execute("SHOW server_version").fetchone()[0]}  # type: ignore[index]
        for setting in ("synchronous_commit", "fsync", "shared_buffers", "max_connections"):
            facts[setting] = conn.execute(f"SHOW {setting}").fetchone()[0]  # type: ignore[index]
    return facts


# -- sizes -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """How big each workload is. A measurement that reaches ``deadline`` seconds stops early and
    reports the rate over what it finished (marked in the output)."""

    runs: int = 3
    enqueue_jobs: int = 10_000  # W1
    drain_jobs: int = 10_000  # W2, W5
    drain_concurrency: tuple[int, ...] = (4, 16)  # W2
    latency_jobs: int = 200  # W3
    latency_gap: float = 0.020  # W3: seconds between enqueues
    ceiling_jobs: int = 10_000  # W4
    ceiling_batches: tuple[int, ...] = (1, 4, 10, 100)  # W4
    ceiling_processes: int = 4  # W4
    history_rows: int = 1_000_000  # W5: DONE rows in the table
    big_history_rows: int = 10_000_000  # W5 history 10M: DONE rows in the table (one run)
    backlog_jobs: int = 100_000  # W5: PENDING jobs in the table
    sleep_jobs: int = 1_600  # W6
    sleep_seconds: float = 0.050  # W6
    sleep_concurrency: int = 16  # W6
    latency_concurrency: int = 4  # W3
    rl_threads: int = 8  # RL: threads calling acquire()
    rl_seconds: float = 3.0  # RL: how long each measurement calls
    rl_drain_jobs: int = 4_000  # RL drain: due jobs of a rate-limited queue (task), RL_DRAIN_RATE a second
    deadline: float = 8.0  # seconds a throughput measurement may take at most
    producers: int = 8  # W7: enqueueing processes
    producer_seconds: float = 4.0  # W7: how long each enqueues
    fair_drain_keys: int = 1_000  # fair drain: W2 c4's jobs over this many fairness keys
    fair_backlogs: tuple[int, ...] = (25_000, 100_000, 1_000_000)  # fair claim: due jobs queued
    fair_claim_keys: int = 10_000  # fair claim: over this many keys
    fair_claims: int = 2_000  # fair claim: claim_batch calls timed per backlog


FULL = Sizes()
QUICK = Sizes(
    runs=1,
    enqueue_jobs=200,
    drain_jobs=1_500,  # enough that a fast drain is still running when its clock starts
    latency_jobs=20,
    ceiling_jobs=500,
    history_rows=20_000,
    big_history_rows=50_000,
    backlog_jobs=2_000,
    sleep_jobs=64,
    deadline=5.0,
    rl_seconds=0.5,
    rl_drain_jobs=600,
    producer_seconds=0.5,
    fair_drain_keys=50,
    fair_backlogs=(2_000, 5_000),
    fair_claim_keys=100,
    fair_claims=50,
)


# -- statistics ------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100)."""
    data = sorted(values)
    if not data:
        raise ValueError("no values")
    k = (len(data) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def wait_for(predicate: Callable[[], Any], timeout: float, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


# -- processes -------------------------------------------------------------------------------------
def child_env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(extra)
    return env


class WorkerGroup:
    """Worker processes of one system, each in its own process group, started before a measurement
    and stopped after it. Each writes a ready file once its worker loop is about to start."""

    def __init__(self, system: str, db_url: str, logdir: Path, env: dict[str, str] | None = None):
        self.system, self.db_url, self.logdir = system, db_url, logdir
        self.env = env or {}
        self.procs: list[tuple[subprocess.Popen[bytes], Path, Any]] = []

    def start(self, slots: int, total: int, *extra: str) -> None:
        n = len(self.procs)
        ready = self.logdir / f"{self.system}-{os.getpid()}-{n}.ready"
        ready.unlink(missing_ok=True)
        log = open(self.logdir / f"{self.system}-worker-{n}.log", "ab")  # noqa: SIM115 (closed in stop)
        cmd = [sys.executable, "-m", "bench.worker", self.system, "--database", self.db_url]
        cmd += ["--slots", str(slots), "--total", str(total), "--ready", str(ready), *extra]
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=child_env(**self.env),
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        self.procs.append((proc, ready, log))

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            for proc, _, _ in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.system} worker exited early (code {proc.returncode}); {self.tail()}"
                    )
            return all(path.exists() for _, path, _ in self.procs)

        if not wait_for(ready, timeout, 0.02):
            raise RuntimeError(f"{self.system} workers not ready after {timeout}s; {self.tail()}")

    def check_alive(self) -> None:
        for proc, _, _ in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{self.system} worker exited (code {proc.returncode}); {self.tail()}")

    def tail(self) -> str:
        lines: list[str] = []
        for _, _, log in self.procs:
            log.flush()
            text = Path(log.name).read_text(errors="replace").strip().splitlines()
            lines += text[-5:]
        return "worker log: " + " | ".join(lines[-8:]) if lines else "no worker output"

    def stop(self, grace: float = 10.0) -> None:
        for proc, _, _ in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc, path, log in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # leftovers of this group (e.g. a pool's children)
            proc.wait()
            path.unlink(missing_ok=True)
            log.close()
        self.procs.clear()


def dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
