"""A quick run of the benchmark suite (tiny sizes) so that it cannot rot. No timing is asserted."""

import json
import subprocess
import sys

import pytest

from bench import pgbouncer
from tests.conftest import ROOT, child_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.p1]

PEERS = ["procrastinate", "pgqueuer", "pgqueuer_defaults", "tasks_db", "ox", "q2", "oban", "chancy"]
NEW_PEERS = ["pgqueuer_defaults", "oban", "chancy"]


def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE")  # each benchmark process configures Django for its own system
    proc = subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_every_system_is_available_or_says_why():
    listing = bench("--list").stdout.splitlines()
    names = {line.split()[0]: line for line in listing}
    assert set(names) == {"jobq", "jobq_pgbouncer", "jobq_observed", "jobq_tasks", "psycopg", *PEERS}
    for line in names.values():
        reason = line.rstrip().endswith("available") or any(
            why in line for why in ("not installed", "needs", "failed")
        )
        assert reason, line
    assert names["jobq"].rstrip().endswith("available")
    assert names["psycopg"].rstrip().endswith("available")
    if pgbouncer.binary() is None:
        assert "needs pgbouncer" in names["jobq_pgbouncer"]


def test_quick_run_measures_every_workload_for_django_jobq(tmp_path):
    out = tmp_path / "bench.json"
    proc = bench("--quick", "--systems", "jobq,psycopg", "--json", str(out), timeout=240)
    doc = json.loads(out.read_text())
    for key in ("W1 single", "W1 keyed", "W1 bulk", "W2 c4", "W2 c16", "W3", "W5 history", "W5 backlog",
                "W5 history 10M", "W6 c16", "RL c1", "RL c8", "RL c8 keys", "RL refused c1", "RL window c1",
                "RL drain", "RL drain task",
                "FC backlog", "FC depth", "FC others capped", "FC capped", "FC task capped",
                "W7 p8"):  # fmt: skip
        runs = doc["results"][key]["jobq"]
        assert runs and all("error" not in r for r in runs), (key, runs)
    for key in ("W1 single", "W1 bulk", "W3", "W4 b1", "W4 b4", "W4 b10", "W4 b100", "W7 p8"):
        runs = doc["results"][key]["psycopg"]
        assert runs and all("error" not in r for r in runs), (key, runs)
    for name in ("jobq", "psycopg"):  # django-jobq's wake-up and the floor's (plain psycopg)
        latency = doc["results"]["W3"][name][0]
        assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"], (name, latency)
    assert "LISTEN" in doc["results"]["W3"]["psycopg"][0]["layout"]  # one process waiting on LISTEN
    # W5 history 10M at its tiny quick size, once.
    assert doc["sizes"]["big_history_rows"] <= 100_000
    assert len(doc["results"]["W5 history 10M"]["jobq"]) == 1
    rows = {row["row"]: row for row in doc["table"]}
    assert "vs_reference" in rows["W2 c4"]  # held against the plain-psycopg ceiling at batch 4
    assert "vs_reference" in rows["W1 keyed"]  # held against W1 single
    assert "vs_reference" in rows["W7 p8"]  # held against plain INSERTs from as many processes
    for row in ("W3 p50", "W3 p99"):  # jobq ÷ the floor
        assert rows[row]["reference"].startswith("the floor") and rows[row]["vs_reference"] > 0, rows[row]
    for row in ("FC task capped", "W5 history 10M"):  # held against the W2 c4 run just before each run
        assert rows[row]["reference"].startswith("django-jobq W2 c4 run before each run"), rows[row]
        assert all(r["reference_rate"] > 0 for r in doc["results"][row]["jobq"]), row
    assert doc["results"]["W7 p8"]["jobq"][0]["producers"] == 8
    # The targets: every one listed, met or missed (None: not measured), with the medians it came from.
    targets = {t["target"]: t for t in doc["targets"]}
    for name in ("W3 p50 <= 1.15x the floor's", "W3 p99 <= 1.5x the floor's", "W2 c4 >= 1.0x W4 b4",
                 "W2 c16 >= 0.8x W4 b10", "W1 single >= 0.9x plain INSERT", "W1 keyed >= 0.9x W1 single",
                 "W7 >= 0.8x plain INSERT from as many processes", "W1 bulk >= 0.6x plain COPY",
                 "FC capped (queue MAX_RUNNING 4) >= 0.8x W2 c4",
                 "FC task capped (@task(max_running=4)) >= 0.8x W2 c4", "W5 backlog >= 0.9x W2 c4",
                 "W5 history >= 0.9x W2 c4", "W5 history 10M >= 0.85x W2 c4"):  # fmt: skip
        assert targets[name]["met"] in (True, False) and targets[name]["value"] > 0, targets[name]
    floor = targets["W3 p50 <= 1.15x the floor's"]
    assert floor["against"]["system"] == "psycopg" and floor["against"]["median"] > 0, floor
    for name in (
        "W3 best peer's p50 >= 1.5x jobq's",
        "W2 c4 >= 2x best peer",
        "django.tasks W2 c4 >= 0.9x native",
    ):
        assert targets[name]["met"] is None and targets[name]["value"] is None  # no peer in this run
    assert "W3 p50 <= 1.15x the floor's: " in proc.stdout
    assert "W2 c4 >= 2x best peer: not measured" in proc.stdout
    for key in ("W2 c4", "W2 c16"):  # the workers' memory, after the warm-up and after the drain
        run = doc["results"][key]["jobq"][0]
        assert run["rss_warm_mib"] > 0 and run["rss_after_mib"] > 0 and run["rss_processes"] >= 1, run
        assert rows[f"{key} RSS after the drain"]["cells"]["jobq"]["median"] == run["rss_after_mib"]
    # The per-job growth target is listed (a drain of this size may end before its halfway sample).
    assert any(t["target"].startswith("jobq worker RSS growth") for t in doc["targets"])
    assert "W2 c4 (jobs/s)" in proc.stdout and "Targets" in proc.stdout


def test_quick_enqueue_of_every_peer_or_a_reason_for_skipping_it(tmp_path):
    out = tmp_path / "bench.json"
    bench("--quick", "--systems", ",".join(PEERS), "--workloads", "W1", "--json", str(out))
    doc = json.loads(out.read_text())
    for name in PEERS:
        system = doc["systems"][name]
        if system["skipped"]:
            assert system["skipped"].strip(), name  # listed with the reason, never silently dropped
            assert name not in doc["results"].get("W1 single", {})
            continue
        runs = doc["results"]["W1 single"][name]
        assert runs and all("error" not in r for r in runs), (name, runs)


@pytest.mark.skipif(
    pgbouncer.binary() is None, reason="pgbouncer is not installed (apt-get install pgbouncer)"
)
def test_quick_pgbouncer_column_measures_w2_c4_as_a_ratio_to_direct(tmp_path):
    out = tmp_path / "bench.json"
    proc = bench("--quick", "--systems", "jobq,jobq_pgbouncer", "--workloads", "W2", "--json", str(out))
    doc = json.loads(out.read_text())
    measured = {key for key, per in doc["results"].items() if "jobq_pgbouncer" in per}
    assert measured == {"W2 c4"}  # the pooler's column is W2 c4 only
    runs = doc["results"]["W2 c4"]["jobq_pgbouncer"]
    assert runs and all("error" not in r for r in runs), runs
    rows = {row["row"]: row for row in doc["table"]}
    assert rows["W2 c4"]["pooled_vs_direct"] > 0
    assert "W2 c4: django-jobq through PgBouncer (transaction mode) = " in proc.stdout


def test_quick_observed_column_measures_w2_as_a_ratio_to_plain(tmp_path):
    out = tmp_path / "bench.json"
    proc = bench("--quick", "--systems", "jobq,jobq_observed", "--workloads", "W2", "--json", str(out))
    doc = json.loads(out.read_text())
    assert {key for key, per in doc["results"].items() if "jobq_observed" in per} == {"W2 c4", "W2 c16"}
    for key in ("W2 c4", "W2 c16"):
        runs = doc["results"][key]["jobq_observed"]
        assert runs and all("error" not in r for r in runs), runs
    rows = {row["row"]: row for row in doc["table"]}
    assert rows["W2 c4"]["observed_vs_plain"] > 0 and rows["W2 c16"]["observed_vs_plain"] > 0
    assert "W2 c4: django-jobq with metrics and tracing on = " in proc.stdout


def test_quick_drain_of_the_newer_peers_with_their_memory_or_a_reason_for_skipping_them(tmp_path):
    out = tmp_path / "bench.json"
    systems = ",".join(["jobq", *NEW_PEERS])
    bench("--quick", "--systems", systems, "--workloads", "W2", "--json", str(out), timeout=240)
    doc = json.loads(out.read_text())
    rows = {row["row"]: row for row in doc["table"]}
    for name in NEW_PEERS:
        system = doc["systems"][name]
        if system["skipped"]:
            assert system["skipped"].strip(), name
            assert name not in doc["results"].get("W2 c4", {})
            continue
        runs = doc["results"]["W2 c4"][name]
        assert runs and all("error" not in r for r in runs), (name, runs)
        assert runs[0]["rss_warm_mib"] > 0 and runs[0]["rss_after_mib"] > 0, runs
        assert rows["W2 c4 RSS after warm-up"]["cells"][name] is not None


@pytest.mark.slow
def test_quick_run_of_the_django_tasks_column(tmp_path):
    """django-jobq through Django's Tasks API, measured where it is held against native jobq."""
    out = tmp_path / "bench.json"
    bench("--quick", "--systems", "jobq,jobq_tasks", "--workloads", "W1,W2,W3", "--json", str(out))
    doc = json.loads(out.read_text())
    for key in ("W1 single", "W2 c4", "W3"):
        runs = doc["results"][key]["jobq_tasks"]
        assert runs and all("error" not in r for r in runs), (key, runs)
    assert "jobq_tasks" not in doc["results"]["W2 c16"] and "jobq_tasks" not in doc["results"]["W1 bulk"]
    # each W2 c4 run through Django's API follows a native one, and is held against it
    assert all(r["reference_rate"] > 0 for r in doc["results"]["W2 c4"]["jobq_tasks"])
    assert all("reference_rate" not in r for r in doc["results"]["W2 c4"]["jobq"])
    targets = {t["target"]: t for t in doc["targets"]}
    assert targets["django.tasks W2 c4 >= 0.9x native"]["value"] is not None
    assert targets["django.tasks W2 c4 >= 0.9x native"]["paired"] is True
    assert targets["django.tasks W3 p50 >= 0.9x native (native p50 / its p50)"]["met"] in (True, False)


def test_quick_run_of_the_cpu_bound_processes_workload(tmp_path):
    """bench.processes drains the same jobs with one worker process and with two (no timing asserted)."""
    out = tmp_path / "processes.json"
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.processes", "--jobs", "20", "--loops", "1000", "--rounds", "1",
         "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert set(doc["runs"]) == {"1", "2"} and all(len(r) == 1 and r[0] > 0 for r in doc["runs"].values())
    assert doc["ratios"]["1"] == 1.0


def test_the_shards_benchmark_runs_and_reports_every_figure(tmp_path):
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE")  # bench.shards configures Django itself
    out = tmp_path / "shards.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.shards", "--jobs", "120", "--enqueues", "10", "--runs", "1", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures["drain_jobs_per_second"]) == {
        "1 database, no SHARDS",
        "1 database",
        "2 databases",
        "3 databases",
    }
    assert all(value > 0 for value in figures["enqueue_per_second"].values())
