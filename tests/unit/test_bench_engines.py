"""A tiny run of bench.engines on SQLite, so that it cannot rot. No timing is asserted."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.unit, pytest.mark.p1]


def test_the_engine_benchmark_runs_on_sqlite():
    done = subprocess.run(
        [sys.executable, "-m", "bench.engines", "--jobs", "30", "--latency-jobs", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.strip().splitlines()
    assert line.startswith("engine: sqlite") and "W1 single jobs/s" in line and "W3 p95 ms" in line
