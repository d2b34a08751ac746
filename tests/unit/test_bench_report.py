"""The benchmark report's peer and memory rules (bench.report, bench.memory) on made-up results, and
the availability probe of peers whose import can fail."""

import os

import pytest

from bench import memory, readme, report, targets
from bench.common import QUICK
from bench.plan import workloads
from bench.systems import PEERS, SYSTEMS, probe

pytestmark = [pytest.mark.unit, pytest.mark.p1]

PLAN = [w for w in workloads(QUICK) if w.key in ("W2 c4", "W3", "W6 c16")]


def drain(rate, warm=50.0, after=50.0, growth=0.0):
    return [{"rate": rate, "rss_warm_mib": warm, "rss_after_mib": after, "rss_growth_per_job": growth}]


def rows_by_key(results, systems):
    return {r["row"]: r for r in report.table(results, PLAN, QUICK, systems)}


def test_every_peer_column_counts_for_best_peer_including_pgqueuer_with_its_defaults():
    assert {"pgqueuer", "pgqueuer_defaults", "oban", "chancy"} <= set(PEERS)
    results = {"W2 c4": {"jobq": drain(1000), "pgqueuer": drain(400), "pgqueuer_defaults": drain(800)}}
    row = rows_by_key(results, ["jobq", "pgqueuer", "pgqueuer_defaults"])["W2 c4"]
    assert row["best_peer"] == "pgqueuer_defaults"
    assert row["vs_best_peer"] == pytest.approx(1000 / 800)


def test_pgqueuer_with_its_defaults_is_left_out_of_w6_which_assumes_the_concurrency():
    w6 = next(w for w in PLAN if w.key == "W6 c16")
    assert not w6.applies(SYSTEMS["pgqueuer_defaults"])
    assert w6.applies(SYSTEMS["pgqueuer"]) and w6.applies(SYSTEMS["oban"])


def test_memory_rows_are_lower_is_better_and_held_against_no_reference():
    results = {"W2 c4": {"jobq": drain(1000, warm=40, after=41), "oban": drain(300, warm=60, after=64)}}
    rows = rows_by_key(results, ["jobq", "oban"])
    after = rows["W2 c4 RSS after the drain"]
    assert after["unit"] == "MiB"
    assert after["cells"]["jobq"]["median"] == 41
    assert after["best_peer"] == "oban" and after["vs_best_peer"] == pytest.approx(64 / 41)
    assert "vs_reference" not in after
    assert "W2 c4 RSS after warm-up" in rows


@pytest.mark.parametrize(("growth", "met"), [(3.0, True), (250.0, False)])
def test_jobq_rss_growth_per_job_is_a_target_with_met_or_missed(growth, met):
    results = {"W2 c4": {"jobq": drain(1000, growth=growth)}}
    checks = targets.targets(results)
    check = next(c for c in checks if c["target"].startswith("jobq worker RSS growth"))
    assert check["value"] == growth and check["met"] is met


def test_runs_without_memory_figures_leave_the_memory_cells_empty():
    results = {"W2 c4": {"jobq": [{"rate": 1000.0}]}}
    rows = rows_by_key(results, ["jobq"])
    assert rows["W2 c4"]["cells"]["jobq"]["median"] == 1000
    assert rows["W2 c4 RSS after the drain"]["cells"]["jobq"] is None


def test_group_rss_sums_vmrss_over_a_process_group():
    own = memory.group_rss([os.getpgrp()])
    assert own["processes"] >= 1 and own["kb"] > 0
    assert memory.group_rss([]) == {"kb": 0, "processes": 0}


def test_a_peer_whose_import_fails_is_skipped_with_the_exception_text():
    assert probe.importable("bench.work") is None
    reason = probe.importable("bench.work", "bench.no_such_module")
    assert reason is not None
    assert reason.startswith("`import bench.no_such_module` failed: ModuleNotFoundError: ")


# -- README.md's figures (bench.readme) --------------------------------------------------------------
def test_readme_figures_are_docs_benchmarks_latest_results():
    """README's Throughput and Worker memory rows are docs/benchmark.md's latest full run: after a new
    run, `python -m bench.readme` copies them."""
    current = readme.README.read_text(encoding="utf-8")
    assert readme.update(current, readme.BENCHMARK.read_text(encoding="utf-8")) == current


BENCHMARK = """\
## Latest results

| Workload | django-jobq | procrastinate | django-tasks-db | django-q2 (ORM) | jobq vs best peer |
|---|---|---|---|---|---|
| W2 c4 (jobs/s) | 11,292 (11,098-12,219) | 628 (626-634)* | 538 (513-553)*! | 130 (125-136) | 1.98x |
| W2 c16 (jobs/s) | 17,718 (17,270-18,390) | 800 (789-841)* | 557 (525-576) | error | 2.20x |
| W3 p50 (ms) | 2.5 (2.1-2.8) | 3.7 (3.5-4.0) | 459 (451-460) | 103 (102-104) | 1.16x |
| W2 c4 RSS after the drain (MiB) | 58.9 (58.9-58.9) | 39.6 (39.6-39.7)* | — | 370.2 (369.8-370.4) | 0.67x |

* a run stopped at the time limit
"""


def test_readme_rows_take_the_medians_mark_time_limited_drains_and_leave_no_figure_unmeasured():
    made = readme.rows(readme.results(BENCHMARK))
    assert made[readme.THROUGHPUT] == (
        f"{readme.THROUGHPUT} 11,292 / 17,718; 2.5 ms | not measured | not measured | 628† / 800†; 3.7 ms"
        " | 538† / 557; 459 ms (1 s polling) | not measured |"
    )
    assert made[readme.MEMORY] == (
        f"{readme.MEMORY} 58.9 | not measured | not measured | 39.6† | not measured | 370.2 |"
    )


def test_readme_update_refuses_a_readme_without_its_table_or_rows():
    with pytest.raises(ValueError, match="no table headed"):
        readme.update("# README\n", BENCHMARK)
    with pytest.raises(ValueError, match="0 lines starting"):
        readme.update(readme.HEADER + "\n", BENCHMARK)


def test_a_rate_limited_drain_is_held_against_its_limit_with_its_claims_per_run():
    plan = [w for w in workloads(QUICK) if w.key in ("RL drain", "RL drain task")]
    assert [w.key for w in plan] == ["RL drain", "RL drain task"]
    results = {
        "RL drain": {"jobq": [{"rate": 199.0, "claims_per_run": 1.0}]},
        "RL drain task": {"jobq": [{"rate": 150.0, "claims_per_run": 2.9}]},
    }
    rows = {r["row"]: r for r in report.table(results, plan, QUICK, ["jobq"])}
    assert rows["RL drain"]["vs_reference"] == pytest.approx(199 / 200)
    assert (
        rows["RL drain task claims"]["unit"] == "claims/run"
        and "vs_reference" not in rows["RL drain task claims"]
    )
    assert "2.90 (2.90-2.90)" in report.render(list(rows.values()), ["jobq"], markdown=False)
    checks = {c["target"]: c["met"] for c in targets.targets(results) if c["target"].startswith("RL drain")}
    assert checks == {
        "RL drain >= 0.95x its limit (200/s)": True,
        "RL drain claims <= 1.1 per run": True,
        "RL drain task >= 0.95x its limit (200/s)": False,
        "RL drain task claims <= 1.1 per run": False,
    }


def test_a_paired_row_is_held_against_the_runs_made_just_before_its_own():
    plan = [w for w in workloads(QUICK) if w.key in ("W2 c4", "fair drain")]
    assert {w.key: w.paired_system("jobq") for w in plan} == {"W2 c4": None, "fair drain": "jobq"}
    results = {  # W2 c4's own runs, minutes apart, would make it 640 / 1,000 = 0.64x
        "W2 c4": {"jobq": drain(1_000.0)},
        "fair drain": {"jobq": [{"rate": 600.0, "reference_rate": 700.0}, {"rate": 640.0, "reference_rate": 600.0},
                                {"rate": 700.0, "reference_rate": 800.0}]},
    }  # fmt: skip
    # each pair's ratio: 0.857, 1.067, 0.875; their median, not the medians' ratio (640 / 700)
    rows = {r["row"]: r for r in report.table(results, plan, QUICK, ["jobq"])}
    assert rows["fair drain"]["reference"].startswith("django-jobq W2 c4 run before each run")
    assert rows["fair drain"]["vs_reference"] == pytest.approx(700 / 800)
    check = next(c for c in targets.targets(results) if c["target"].startswith("fair drain"))
    assert check["value"] == pytest.approx(700 / 800) and check["met"] is False
    line = targets.render_targets([check], markdown=False)
    assert "the median of each pair's ratio" in line, line
    assert "django-jobq W2 c4 before each fair drain run 700/s" in line, line


def test_django_tasks_w2_c4_is_held_against_a_native_run_just_before_each_of_its_runs():
    (w2,) = [w for w in workloads(QUICK) if w.key == "W2 c4"]
    assert w2.paired_system("jobq_tasks") == "jobq" and w2.paired_system("procrastinate") is None
    results = {
        "W2 c4": {
            "jobq": drain(1_000.0),
            "jobq_tasks": [{"rate": 500.0, "reference_rate": 520.0}, {"rate": 900.0, "reference_rate": 950.0},
                           {"rate": 700.0, "reference_rate": 760.0}],
        }
    }  # fmt: skip
    check = next(c for c in targets.targets(results) if c["target"].startswith("django.tasks W2 c4"))
    assert check["value"] == pytest.approx(900 / 950) and check["met"] is True  # 700 / 1,000 unpaired
    line = targets.render_targets([check], markdown=False)
    assert "django-jobq W2 c4 before each W2 c4 run 760/s" in line, line


def test_results_without_paired_runs_leave_the_target_unmeasured():
    results = {"W2 c4": {"jobq": drain(1_000.0)}, "fair drain": {"jobq": [{"rate": 600.0}]}}
    plan = [w for w in workloads(QUICK) if w.key in ("W2 c4", "fair drain")]
    rows = {r["row"]: r for r in report.table(results, plan, QUICK, ["jobq"])}
    assert rows["fair drain"]["reference"] == "django-jobq W2 c4"  # an older file: W2 c4's own runs
    check = next(c for c in targets.targets(results) if c["target"].startswith("fair drain"))
    assert check["met"] is None


def test_the_fair_claims_latency_target_reads_in_milliseconds():
    results = {"fair claim p99": {"jobq": [{"p99_25k": 2.5, "p99_1M": 5.1}]}}
    check = next(c for c in targets.targets(results) if c["target"].startswith("fair claim p99"))
    line = targets.render_targets([check], markdown=False)
    assert "p99_1M 5.1 ms / django-jobq fair claim p99 p99_25k 2.5 ms" in line, line
