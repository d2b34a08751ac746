"""A quick run of bench.workflows (a chain, a group with a callback, a plain drain; tiny sizes) so that
it cannot rot. No timing is asserted."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, child_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.p1]


def test_quick_run_of_the_workflows_workload(tmp_path):
    out = tmp_path / "workflows.json"
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE")  # the benchmark configures Django for its own throwaway database
    proc = subprocess.run(
        [sys.executable, "-m", "bench.workflows", "--chain", "20", "--group", "20", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"chain", "group + callback", "plain (W2-like)"}
    assert [results[k]["jobs"] for k in results] == [20, 21, 20]
    for figures in results.values():
        assert figures["drain_jobs_per_s"] > 0 and figures["end_to_end_jobs_per_s"] > 0, figures
    assert results["chain"]["per_step_ms"] > 0
    assert results["group + callback"]["callback_after_last_member_ms"] >= 0
    assert "| chain | 20 |" in proc.stdout
