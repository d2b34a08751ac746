"""A quick run of bench.batches (single jobs against a batch task; tiny sizes) so that it cannot rot. No
timing is asserted."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, child_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.p1]


def test_quick_run_of_the_batches_workload(tmp_path):
    out = tmp_path / "batches.json"
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE")  # the benchmark configures Django for its own throwaway database
    proc = subprocess.run(
        [sys.executable, "-m", "bench.batches", "--jobs", "150", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["results"]) == {"single jobs", "batch task"}
    for figures in doc["results"].values():
        assert figures["jobs"] == 150 and figures["drain_jobs_per_s"] > 0, figures
    assert doc["ratio"] > 0 and "| batch task | 150 |" in proc.stdout
