"""docs/observability: the Grafana dashboard and the alert rules name only metrics django-jobq serves;
the rules pass `promtool check rules` and their unit tests (`promtool test rules`), which make each
alert fire when it should and stay quiet when it should not."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from django_jobq.metrics import REGISTRY, worker
from django_jobq.metrics.database import FAMILIES
from tests.conftest import ROOT

pytestmark = pytest.mark.unit

DOCS = ROOT / "docs" / "observability"
NAME = re.compile(r"\b(jobq_[a-z_]+)")
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def served() -> set[str]:
    """The metric names a scrape can show: the worker's families (with their samples' suffixes) and
    the database collector's."""
    from prometheus_client import generate_latest

    worker.connect()
    names = {family.name for family in text_string_to_metric_families(generate_latest(REGISTRY).decode())}
    names |= {getattr(m, "_name", "") for m in vars(worker).values() if hasattr(m, "_name")}
    lanes = {"jobq_lane_slots", "jobq_lane_busy_slots", "jobq_lane_stuck_slots"}  # a running worker's
    return {n + s for n in names for s in ("", *SUFFIXES)} | set(FAMILIES) | lanes


def expressions() -> list[str]:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rules = (DOCS / "prometheus-alerts.yml").read_text()
    return exprs + re.findall(r"^\s*expr:\s*(.+)$", rules, flags=re.MULTILINE)


def test_every_metric_the_docs_name_is_served():
    names = {name for expr in expressions() for name in NAME.findall(expr)}
    assert len(names) >= 12
    assert names <= served(), sorted(names - served())


def test_every_panel_and_rule_explains_itself():
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    assert all(panel["title"] and panel["targets"] for panel in dashboard["panels"])
    rules = (DOCS / "prometheus-alerts.yml").read_text()
    assert rules.count("- alert:") == rules.count("summary:") == 11


def promtool() -> str:
    """Debian's promtool (package prometheus; .ci/run installs it): a CI run without it fails."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: .ci/run installs it (apt-get install prometheus)")
        pytest.skip("promtool is not installed (apt-get install --no-install-recommends prometheus)")
    return found


@pytest.mark.parametrize(
    "args", [("check", "rules", "prometheus-alerts.yml"), ("test", "rules", "prometheus-alerts.test.yml")]
)
def test_promtool_checks_the_rules_and_runs_their_unit_tests(args):
    done = subprocess.run([promtool(), *args], cwd=DOCS, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_test_where_it_fires_and_one_where_it_does_not():
    rules = yaml.safe_load((DOCS / "prometheus-alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = yaml.safe_load((DOCS / "prometheus-alerts.test.yml").read_text())
    assert tests["rule_files"] == ["prometheus-alerts.yml"]
    checks = [check for test in tests["tests"] for check in test["alert_rule_test"]]
    fires = {check["alertname"] for check in checks if check.get("exp_alerts")}
    quiet = {check["alertname"] for check in checks if not check.get("exp_alerts")}
    assert len(alerts) == 11
    assert alerts - fires == set(), "never shown firing"
    assert alerts - quiet == set(), "never shown quiet"


def test_the_page_says_how_to_scrape_the_view_with_its_token():
    """The view with METRICS_VIEW = "token": the page names JOBQ["METRICS_TOKEN"], and every scrape
    configuration of the view sends it as a bearer token (Prometheus's authorization block)."""
    page = (ROOT / "docs" / "observability.md").read_text()
    assert 'JOBQ["METRICS_TOKEN"]' in page and '"METRICS_VIEW": "token"' in page
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", page, flags=re.DOTALL)]
    views = [
        c for b in blocks for c in b.get("scrape_configs", []) if c.get("metrics_path") == "/jobq/metrics/"
    ]
    assert views
    for config in views:
        authorization = config["authorization"]
        assert authorization.get("type", "Bearer") == "Bearer"
        assert authorization.get("credentials_file") or authorization.get("credentials")


def test_the_database_figures_are_never_summed_across_the_endpoints_that_serve_them():
    """Every endpoint that serves the database's figures serves the same ones: a panel or a rule takes
    max by queue first (sum(jobq_queue_due_jobs) would count each queue once per replica)."""
    summed = re.compile(r"\bsum(?:\s+by\s*\([^)]*\))?\s*\(\s*(jobq_[a-z_]+)")
    assert not [expr for expr in expressions() for name in summed.findall(expr) if name in FAMILIES]
