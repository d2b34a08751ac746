"""The job table's autovacuum settings (migration 0008): set on PostgreSQL, taken back by the reverse
migration, and why the fillfactor is left alone: no claim or completion is a HOT update."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from django_jobq.models import Job
from django_jobq.worker import Worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

storage = importlib.import_module("django_jobq.migrations.0008_job_table_autovacuum")


def reloptions() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE oid = 'jobq_job'::regclass")
        options = cursor.fetchone()[0] or []
    return dict(option.split("=", 1) for option in options)


def table_stats() -> tuple[int, int]:
    """Updates and HOT updates of jobq_job, as this backend's statistics see them now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'jobq_job'::regclass"
        )
        return cursor.fetchone()


def test_the_migration_sets_the_job_tables_autovacuum_and_its_reverse_resets_it():
    assert reloptions() == storage.SETTINGS
    with connection.schema_editor() as editor:
        storage.reset_storage(None, editor)
    try:
        assert reloptions() == {}
    finally:
        with connection.schema_editor() as editor:
            storage.set_storage(None, editor)
    assert reloptions() == storage.SETTINGS


def test_claims_and_completions_are_never_hot_updates_which_is_why_fillfactor_stays_at_100():
    if connection.pg_version < 150000:
        pytest.skip("pg_stat_force_next_flush() is PostgreSQL 15+")
    ids = [Job.objects.enqueue("test.noop") for _ in range(50)]
    updates_before, hot_before = table_stats()
    worker = Worker({"default": 2}, burst=True)
    worker.run()
    assert worker.processed == len(ids)
    updates_after, hot_after = table_stats()
    # at least a claim and a completion per job (batches never merge two jobs' rows), none HOT: each
    # changes status, which every partial index's predicate names
    assert updates_after - updates_before >= 2 * len(ids)
    assert hot_after - hot_before == 0
