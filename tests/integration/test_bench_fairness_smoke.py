"""A quick run of the fair-queue rows of the benchmark (bench.fairness; tiny sizes) so that they cannot
rot. No timing is asserted."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, child_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.p1]


def test_quick_run_of_the_fair_queue_rows(tmp_path):
    out = tmp_path / "bench.json"
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE")  # each benchmark process configures Django for its own system
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--systems", "jobq", "--workloads", "W2,FQ",
         "--rows", "W2 c4,fair drain,fair claim p99", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    for key in ("W2 c4", "fair drain", "fair claim p99"):
        runs = doc["results"][key]["jobq"]
        assert runs and all("error" not in r for r in runs), (key, runs)
    claim = doc["results"]["fair claim p99"]["jobq"][0]
    assert claim["keys"] == doc["sizes"]["fair_claim_keys"]
    for backlog in ("2k", "5k"):  # the quick sizes' backlogs, each measured
        assert 0 < claim[f"p50_{backlog}"] <= claim[f"p99_{backlog}"], claim
    rows = {row["row"]: row for row in doc["table"]}
    # Held against the W2 c4 run made just before each of its runs, on the same database.
    assert all(r["reference_rate"] > 0 for r in doc["results"]["fair drain"]["jobq"])
    assert rows["fair drain"]["reference"].startswith("django-jobq W2 c4 run before each run")
    assert rows["fair drain"]["vs_reference"] > 0
    assert {"fair claim p99 2k", "fair claim p99 5k"} <= set(rows)
    targets = {t["target"]: t for t in doc["targets"]}
    assert targets["fair drain (1,000 keys) >= 0.9x W2 c4"]["met"] is not None
