"""A worker with metrics and tracing off imports only what it runs: no metrics exporter, no
OpenTelemetry, no admin pages, no Django Tasks layer, no supervisor, no cron parser without a
schedule, and no SQLite driver on PostgreSQL (each a few hundred KiB of every worker's memory)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = [pytest.mark.unit, pytest.mark.p1]


def imported(*args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.procs.worker_imports", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_worker_that_ran_jobs_imported_none_of_the_optional_layers(tmp_path):
    assert imported("sqlite", str(tmp_path / "probe.sqlite3")) == ["sqlite3", "sqlite3.dbapi2"]


def test_a_worker_on_postgresql_imports_none_of_them_nor_the_sqlite_driver():
    assert imported("postgresql") == []
