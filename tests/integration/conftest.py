"""Shared by the integration tests: job rows in each state, and staff users with given permissions."""

import contextlib
import datetime as dt
import itertools
import secrets
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from django_jobq.models import Job, JobStatus
from tests.conftest import ROOT, child_env


def traceback_of(exc: str, message: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/tasks.py", line 12, in send\n'
        "    deliver(order)\n"
        f"{exc}: {message}\n"
    )


def make_job(**fields) -> Job:
    values = {"task": "test.echo", "queue": "default", "payload": {"order": 1}, "max_attempts": 5, **fields}
    return Job.objects.create(**values)


def dead_job(
    task="test.echo", exc="ValueError", message="boom", queue="default", attempts=3, **fields
) -> Job:
    errors = [
        {
            "attempt": n,
            "at": f"2026-03-01T09:0{n}:00+00:00",
            "worker": f"w{n}",
            "error": traceback_of(exc, f"{message} #{n}"),
        }
        for n in range(1, attempts + 1)
    ]
    return make_job(
        task=task,
        queue=queue,
        status=JobStatus.DEAD,
        attempts=attempts,
        max_attempts=attempts,
        worker_id=f"w{attempts}",
        last_error=errors[-1]["error"],
        errors=errors,
        finished_at=timezone.now(),
        **{"exception": exc, **fields},  # what the statement that made it DEAD writes
    )


def running_job(**fields) -> Job:
    now = timezone.now()
    values = {
        "attempts": 1,
        "worker_id": "host-1:42",
        "started_at": now,
        "lease_until": now + dt.timedelta(seconds=30),
    }
    return make_job(**{**values, **fields, "status": JobStatus.RUNNING})


_users = itertools.count()


@pytest.fixture
def staff(django_user_model):
    """A logged-in client for a staff user holding exactly the given django_jobq permissions (``csrf``:
    a client that enforces CSRF checks)."""

    def make(*codenames: str, csrf: bool = False) -> Client:
        user = django_user_model.objects.create_user(f"staff{next(_users)}", password="pw", is_staff=True)
        perms = Permission.objects.filter(content_type__app_label="django_jobq", codename__in=codenames)
        assert perms.count() == len(codenames), codenames
        user.user_permissions.set(perms)
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(user)
        client.user = user
        return client

    return make


def server_url() -> str:
    """postgres://user@host:port of the server the suite's database is on (no database named)."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"


@contextlib.contextmanager
def fresh_databases(*prefixes: str) -> Iterator[list[str]]:
    """A fresh database per prefix on the suite's server (named PREFIX_<random>), dropped afterwards:
    their URLs, for subprocesses that migrate and use them."""
    import psycopg

    token = secrets.token_hex(3)
    names = [f"{prefix}_{token}" for prefix in prefixes]
    with psycopg.connect(f"{server_url()}/postgres", autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield [f"{server_url()}/{name}" for name in names]
    finally:
        with psycopg.connect(f"{server_url()}/postgres", autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_python(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """``python ARGS`` against ``env`` (over the test database's environment); its output, or the
    test fails with its standard error."""
    proc = subprocess.run(
        [sys.executable, *args],
        env=child_env(**env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout
