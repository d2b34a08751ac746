"""The reaper's vacuum of jobq_fair_key (MaintenanceManager.vacuum_fair_keys): each claim of a fair
queue leaves a dead version of every key row it moved on, whose index entries the next claims' walk
of the keys reads past until a vacuum. What the walk reads is asserted (pages, from EXPLAIN), never
how long it took. Autovacuum is held off on the table, so that only the reaper vacuums it."""

import time

import pytest
from django.db import connection, transaction

from django_jobq.managers import maintenance
from django_jobq.managers.maintenance import FAIR_KEYS_VACUUM_AT
from django_jobq.models import Job
from django_jobq.reaper import Reaper
from django_jobq.sql.postgres import fairness
from tests.conftest import plan_nodes
from tests.fair_queue import QUEUE, backlog
from tests.integration.test_plans import run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CLAIM = {
    "worker_id": "w", "lease": 30, "queue": QUEUE, "queues": None, "limit": 4,
    "fair_keys": [], "fair_weights": [], "fair_weight": 1.0,
}  # fmt: skip


@pytest.fixture(autouse=True)
def no_autovacuum():
    """No key rows, and none of the dead versions earlier tests left; no autovacuum until the end."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobq_fair_key")
        cursor.execute("VACUUM jobq_fair_key")
        cursor.execute("ALTER TABLE jobq_fair_key SET (autovacuum_enabled = off)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE jobq_fair_key RESET (autovacuum_enabled)")


def dead_versions() -> int:
    """jobq_fair_key's dead row versions as the statistics count them, once this session's counts
    are reported (PostgreSQL 15 and later: flushed at its next transaction's end when asked; before,
    sent to the collector within half a second, which the callers poll for)."""
    with connection.cursor() as cursor:
        if connection.pg_version >= 150000:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobq_fair_key'")
        return int(cursor.fetchone()[0])


def settled_dead_versions(enough) -> int:
    """dead_versions() once ``enough`` holds of it, or after 30 s: the statistics lag the commits."""
    deadline = time.monotonic() + 30
    while not enough(found := dead_versions()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def walk_pages() -> int:
    """Pages the first probe of a claim's walk of the keys (the lowest vtime) reads."""
    plan = run(fairness.CLAIM_FAIR, CLAIM)
    probes = [n for n in plan_nodes(plan) if n.get("Index Name") == "jobq_fair_key_round"]
    return probes[0]["Shared Hit Blocks"] + probes[0]["Shared Read Blocks"]


def claim_jobs(count: int) -> None:
    for _ in range(count // 10):
        assert len(Job.objects.claim_batch("w1", 10, queues=[QUEUE])) == 10


def test_the_reaper_vacuums_the_key_rows_a_busy_fair_queue_left_dead(fair):
    for key in range(400):
        backlog(f"tenant-{key}", 10)
    claim_jobs(4_000 - 400)  # each claim moves 10 keys on: a dead version of each key row
    assert settled_dead_versions(lambda n: n >= 3_000) >= 3_000
    before = walk_pages()
    assert before >= 15, before  # the walk reads past the dead entries of the lowest vtimes

    Reaper().run_once()

    assert settled_dead_versions(lambda n: n < FAIR_KEYS_VACUUM_AT) < FAIR_KEYS_VACUUM_AT
    after = walk_pages()
    assert after <= 5, (before, after)


def test_a_fair_queue_with_few_dead_versions_is_not_vacuumed(fair):
    for key in range(50):
        backlog(f"tenant-{key}", 2)
    claim_jobs(50)
    assert Job.objects.vacuum_fair_keys() is False


def test_no_vacuum_is_tried_inside_a_transaction(fair):
    for key in range(200):
        backlog(f"tenant-{key}", 7)
    claim_jobs(1_200)
    assert settled_dead_versions(lambda n: n >= FAIR_KEYS_VACUUM_AT) >= FAIR_KEYS_VACUUM_AT
    with transaction.atomic():  # VACUUM cannot run here: skipped, not an error
        assert Job.objects.vacuum_fair_keys() is False
    assert Job.objects.vacuum_fair_keys() is True


@pytest.fixture
def not_the_owner():
    """A role that does not own jobq_fair_key, for SET ROLE; no warning said yet in this process."""
    maintenance._WARNED_CANNOT_VACUUM.discard(connection.alias)
    with connection.cursor() as cursor:
        cursor.execute("DROP ROLE IF EXISTS jobq_not_owner")
        cursor.execute("CREATE ROLE jobq_not_owner")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")
        cursor.execute("DROP ROLE jobq_not_owner")


def test_a_user_that_may_not_vacuum_the_key_rows_says_so_once_and_tries_no_vacuum(
    fair, caplog, not_the_owner
):
    for key in range(200):
        backlog(f"tenant-{key}", 7)
    claim_jobs(1_200)
    dead = settled_dead_versions(lambda n: n >= FAIR_KEYS_VACUUM_AT)
    assert dead >= FAIR_KEYS_VACUUM_AT
    with connection.cursor() as cursor:
        cursor.execute("SET ROLE jobq_not_owner")

    with caplog.at_level("WARNING", logger="django_jobq"):
        assert Job.objects.vacuum_fair_keys() is False
        assert Job.objects.vacuum_fair_keys() is False
    said = [r.getMessage() for r in caplog.records if "may not VACUUM jobq_fair_key" in r.getMessage()]
    assert len(said) == 1, said

    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")
    assert dead_versions() >= FAIR_KEYS_VACUUM_AT  # nothing was vacuumed
    assert Job.objects.vacuum_fair_keys() is True  # the owner may
