"""What the reliability tests share: real processes (workers, reapers, schedulers) with their logs,
the figures each test prints as one JSON line, percentiles, and reading the database through a
restart."""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from django.db import Error as DatabaseError
from django.db import connection

from tests.conftest import ROOT, child_env

T = TypeVar("T")
FIGURES: list[dict[str, Any]] = []  # printed again at the end of the run (conftest)
# PostgreSQL's own words for 40P01 and 40001, and psycopg's classes for them. Not the bare codes: a job id
# such as 40001 in a log line ("job 40001 ... is DEAD") is no serialisation failure.
SERIALISATION_ERRORS = re.compile(
    r"deadlock detected|could not serialize access|DeadlockDetected|SerializationFailure", re.I
)


def report(test: str, **figures: Any) -> dict[str, Any]:
    """Print the test's figures as one JSON line (and keep them for the run's summary)."""
    line = {"test": test, **figures}
    FIGURES.append(line)
    print(json.dumps(line, default=str), flush=True)
    return line


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def spread(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """p50, p99 and max of ``values`` (None when empty), rounded."""

    def r(v: float | None) -> float | None:
        return None if v is None else round(v, digits)

    return {"n": len(values), "p50": r(percentile(values, 50)), "p99": r(percentile(values, 99)),
            "max": r(max(values) if values else None)}  # fmt: skip


def read(query: Callable[[], T], timeout: float = 60.0) -> T:
    """Run ``query`` on the test's connection, reconnecting while the database is restarting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return query()
        except DatabaseError:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def sql(statement: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


class Processes:
    """Management-command processes of one test, each logging to its own file; all stopped at the end."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs, self.env = logs, env
        self.running: dict[str, subprocess.Popen[str]] = {}
        self.files: dict[str, Path] = {}

    def start(self, name: str, command: str, *args: str, prefix: Sequence[str] = (),
              env: dict[str, str] | None = None, module: str = "django") -> subprocess.Popen[str]:  # fmt: skip
        """Start ``python -m module command args`` (a management command) as ``name``, optionally
        behind ``prefix`` (e.g. ``ip netns exec NS`` or ``faketime -f -3h``)."""
        path = self.files[name] = self.logs / f"{name}.log"
        with open(path, "a") as log:
            proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", module, command, *args],
                env=child_env(**{**self.env, **(env or {})}), cwd=ROOT, text=True,
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.running[name] = proc
        return proc

    def worker(self, name: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
        return self.start(name, "jobq_worker", "--worker-id", name, *args, **kwargs)

    def kill(self, name: str) -> None:
        proc = self.running.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop(self, name: str, timeout: float = 30) -> int:
        proc = self.running.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)

    def log(self, name: str) -> str:
        return self.files[name].read_text() if name in self.files else ""

    def serialisation_errors(self) -> list[str]:
        """Lines of every log that mention a deadlock or a serialisation failure."""
        return [
            f"{name}: {line}"
            for name, path in self.files.items()
            for line in path.read_text().splitlines()
            if SERIALISATION_ERRORS.search(line)
        ]


def seeded() -> random.Random:
    """The tests' random source; JOBQ_RELIABILITY_SEED replays a run (the seed is in the figures)."""
    seed = int(os.environ.get("JOBQ_RELIABILITY_SEED") or time.time_ns() % 1_000_000)
    rng = random.Random(seed)
    rng.seed_value = seed  # type: ignore[attr-defined]
    return rng
