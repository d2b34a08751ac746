"""The PostgreSQL engine's cursor: the statements' timestamps read as the ORM reads them, with
psycopg's own loader where that gives the same values, and Django's everywhere else."""

import datetime as dt

import pytest
from django.db import connection
from psycopg.pq import Format

from django_jobq.models import Job
from django_jobq.sql.postgres.engine import TIMESTAMPTZ_OID, QueueCursor

pytestmark = [pytest.mark.integration, pytest.mark.p1, pytest.mark.django_db]

TIMES = ("run_at", "created_at", "started_at", "lease_until")


def _loader() -> type:
    connection.ensure_connection()
    with QueueCursor(connection.connection, prepare=False) as cursor:
        return cursor.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)


def _claimed_and_read() -> tuple[Job, Job]:
    Job.objects.enqueue("test.echo", {"n": 1})
    (claimed,) = Job.objects.claim_batch("w", 1)
    return claimed, Job.objects.get(id=claimed.id)


def test_a_claimed_jobs_times_are_the_orms_in_utc():
    django_loader = connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    assert _loader() is not django_loader  # psycopg's own: the session is in UTC, as Django reads it
    claimed, read = _claimed_and_read()
    for name in TIMES:
        value = getattr(claimed, name)
        assert value == getattr(read, name), name
        assert value.tzinfo is dt.UTC, name


def test_a_session_in_another_time_zone_keeps_djangos_loader():
    connection.ensure_connection()
    django_loader = connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
    try:
        assert _loader() is django_loader
        claimed, read = _claimed_and_read()
        for name in TIMES:
            assert getattr(claimed, name) == getattr(read, name), name
            assert getattr(claimed, name).utcoffset() == getattr(read, name).utcoffset(), name
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
