"""A tiny run of the partitioning prototype (bench/partitioning.py) so that it cannot rot. No timing
is asserted: only that each layout pruned its oldest day and kept the rest."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, child_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.p1]


def test_both_layouts_prune_their_oldest_day_under_a_claimer(tmp_path):
    out = tmp_path / "partitioning.json"
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.partitioning", "--rows", "4000", "--days", "4", "--backlog", "200",
         "--settle", "0.5", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    for layout in ("single", "partitioned"):
        figures = doc[layout]
        assert figures["prune"]["removed"] == 1000, figures  # one day of four
        assert figures["claims_before"]["cycles"] > 0 and figures["claims_after"]["cycles"] > 0, figures
        assert figures["after"]["live_rows"] + figures["after"]["dead_rows"] >= 3000, figures
