"""The PostgreSQL engine: the cursor's timestamps read as the ORM reads them (psycopg's own loader where
that gives the same values, Django's everywhere else), and the prepared statements planned again once
the job table has outgrown their plans."""

import datetime as dt

import pytest
from django.db import connection
from psycopg.pq import Format

from django_jobq.models import Job
from django_jobq.sql.postgres.engine import REPLAN_MIN_BYTES, TIMESTAMPTZ_OID, QueueCursor

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


# -- plans made while the table was small -------------------------------------------------------------


def _claim_once() -> None:
    Job.objects.complete_and_claim("w", [], 1, "default")


def _prepared() -> list[tuple[int, int]]:
    """(generic plans, custom plans) of each statement this session has prepared."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements")
        return [(int(generic), int(custom)) for generic, custom in cursor.fetchall()]


def _grow(rows: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, finished_at)
               SELECT 'test.echo', 'default', '{"n": 1}', 2, 100, now(), 1, 5, '[]', now(), now()
               FROM generate_series(1, %s)""",
            [rows],
        )


@pytest.fixture
def planned_on_an_empty_table():
    """The claim's statement prepared, on its generic plan, while jobq_job is empty, as a worker
    started before any job was enqueued has it."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobq_job")  # in the test's transaction: undone after it
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")  # whatever statistics earlier
        # tests left: the plan a long-lived connection settles on
    assert Job.objects.replan_if_grown() is False  # the size the plans are made at
    for _ in range(3):
        _claim_once()


def test_a_connection_plans_again_once_the_table_outgrew_its_plans(planned_on_an_empty_table):
    ((generic, _),) = _prepared()  # the claim, settled on the empty table's generic plan
    assert generic >= 1
    _grow(20_000)
    assert Job.objects.replan_if_grown() is True
    assert _prepared() == []  # dropped, on the server and in psycopg's cache
    _claim_once()
    ((generic, custom),) = _prepared()  # prepared again, planned for the table as it is now
    assert generic + custom == 1
    assert Job.objects.replan_if_grown() is False  # measured from the new plans' size on


def test_a_table_that_grew_little_keeps_its_plans(planned_on_an_empty_table):
    _grow(100)  # under REPLAN_MIN_BYTES
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_relation_size('jobq_job')")
        assert cursor.fetchone()[0] < REPLAN_MIN_BYTES
    assert Job.objects.replan_if_grown() is False
    ((generic, _),) = _prepared()  # kept
    assert generic >= 1


def test_growth_after_the_table_was_emptied_counts_from_empty(planned_on_an_empty_table):
    _grow(20_000)
    assert Job.objects.replan_if_grown() is True
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobq_job")  # its statements are planned again, for an empty table
    assert Job.objects.replan_if_grown() is False
    _claim_once()
    _grow(20_000)
    assert Job.objects.replan_if_grown() is True
    assert _prepared() == []
