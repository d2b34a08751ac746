"""Shared by the integration tests: job rows in each state, and staff users with given permissions."""

import datetime as dt
import itertools

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from django_jobq.models import Job, JobStatus


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
        **fields,
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
