"""docs/observability: the Grafana dashboard and the alert rules name only metrics django-jobq serves."""

import json
import re

import pytest
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
    assert rules.count("- alert:") == rules.count("summary:") == 10
