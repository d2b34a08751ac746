"""What the fair-queue tests share (tests/contract/test_fair_claims.py on both engines,
tests/integration/test_fair_queues.py on PostgreSQL): a queue marked fair, backlogs per key, and the
per-key state read back. The fixture ``fair`` (QUEUE marked fair) is in tests/conftest.py."""

from django.db import connection

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus

QUEUE = "tenants"


def backlog(key: str, count: int, **options) -> list[int]:
    return Job.objects.enqueue_many(
        NewJob("test.noop", queue=QUEUE, fairness_key=key, **options) for _ in range(count)
    )


def keys_of(jobs) -> list[str]:
    rows = Job.objects.filter(id__in=[j.id for j in jobs]).order_by("id")
    return list(rows.values_list("fairness_key", flat=True))


def claimed_keys(count: int, limit: int = 1) -> list[str]:
    """The keys of the next ``count`` jobs claimed from QUEUE, ``limit`` a claim."""
    keys: list[str] = []
    while len(keys) < count:
        jobs = Job.objects.claim_batch("w1", limit, queues=[QUEUE])
        assert jobs, f"nothing claimed after {len(keys)}"
        keys += keys_of(jobs)
    return keys


def key_rows() -> set[tuple[str, int, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT queue, priority, key FROM jobq_fair_key")
        return set(cursor.fetchall())


def pending_keys() -> set[tuple[str, int, str]]:
    rows = Job.objects.filter(status=JobStatus.PENDING, fairness_key__isnull=False)
    return set(rows.values_list("queue", "priority", "fairness_key").distinct())
