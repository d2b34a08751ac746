"""The README's first command: the example project's demo on SQLite, in a clean environment where no
PostgreSQL is named (DATABASE_URL and every PG* variable unset)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = [pytest.mark.unit, pytest.mark.p0]


def test_demo_runs_on_sqlite_with_no_database_server_named(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("PG")}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # manage.py's default: the example project's settings
    database = tmp_path / "demo.sqlite3"  # the settings' default is example_project/demo.sqlite3
    env["DEMO_SQLITE_PATH"] = str(database)

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    manage("migrate", "--no-input", "-v0")
    out = manage("demo")
    assert "search 'coffee beans': duplicate, not enqueued" in out
    assert "order for bob@example.com: refused, rolled back" in out
    assert "before: PENDING=9, RUNNING=0, DONE=0, DEAD=0" in out
    assert "after:  PENDING=0, RUNNING=0, DONE=8, DEAD=1" in out  # the unknown SKU's restock
    assert "schedule 'nightly-restock' (30 2 * * *): next run at " in out and "next run at ?" not in out
    assert "receipts sent (django.tasks): ada@example.com, cy@example.com" in out
    assert "orders confirmed: 2 of 2" in out
    assert f"(database {str(database)!r})" in out
    stats = manage("jobq_stats")
    assert "DONE" in stats or "done" in stats
    again = manage("demo")  # a clean slate each time: the schedule and the dead letter are made anew
    assert "after:  PENDING=0, RUNNING=0, DONE=8, DEAD=1" in again
