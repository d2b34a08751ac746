import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def python_clock(settings):
    """Make every statement use timezone.now(), so time-machine moves the queue's clock."""
    settings.JOBQ = {**settings.JOBQ, "CLOCK": "python"}


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess that must use the test database this test runs against."""
    db = connection.settings_dict
    url = (
        f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
    }
    env.update(extra)
    return env


def run_module(module: str, *args: str, **popen) -> subprocess.Popen:
    """Start ``python -m module args`` against the test database."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args], env=child_env(), cwd=ROOT, text=True, **popen
    )
