"""The database figures over several databases (django_jobq.metrics.database with JOBQ["SHARDS"]),
against two real servers of their own beside the test database (tests/servers/shards.py): every
series of every database, labelled with it, and a database that is down a figure of its own while
the others are reported; and the workers' counters, labelled with the database each job ran on."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_jobq import dashboard, metrics
from django_jobq.managers.outbox import OutboxManager
from django_jobq.metrics import worker as worker_metrics
from django_jobq.models import Job
from django_jobq.worker import Worker
from django_jobq.worker.group import WorkerGroup
from django_jobq.worker.lanes import lanes_by_database
from tests.integration.test_metrics import samples
from tests.servers.shards import SHARDS

pytestmark = [pytest.mark.integration, pytest.mark.django_facing]
ALIASES = ["default", *SHARDS]


def of(found: dict, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def fresh_figures():
    metrics.enable_database_metrics()
    collector = metrics.database_collector()
    collector.forget()
    yield collector
    collector.forget()


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_every_databases_figures_are_labelled_with_it(placed, fresh_figures):
    Job.objects.enqueue("test.noop")
    for _ in range(2):
        Job.objects.enqueue("test.noop", queue="reports")
    for _ in range(3):
        Job.objects.enqueue("test.noop", queue="archive", delay=3600)
    found = samples()
    for alias in ALIASES:
        assert of(found, "jobq_database_up", database=alias) == 1, alias
    assert of(found, "jobq_queue_jobs", database="default", queue="default", state="pending") == 1
    assert of(found, "jobq_queue_jobs", database="jobs2", queue="reports", state="pending") == 2
    assert of(found, "jobq_queue_due_jobs", database="jobs2", queue="reports") == 2
    assert of(found, "jobq_queue_jobs", database="jobs3", queue="archive", state="pending") == 3
    assert of(found, "jobq_queue_due_jobs", database="jobs3", queue="archive") == 0
    assert not [key for key in found if key[0].startswith("jobq_queue") and "database" not in dict(key[1])]


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_database_that_is_down_is_a_figure_while_the_others_are_reported(placed, fresh_figures):
    Job.objects.enqueue("test.noop", queue="reports")
    placed["jobs3"].stop("fast")
    try:
        found = samples()
        assert of(found, "jobq_database_up", database="jobs3") == 0
        assert of(found, "jobq_database_up", database="jobs2") == 1
        assert of(found, "jobq_database_up", database="default") == 1
        assert of(found, "jobq_queue_jobs", database="jobs2", queue="reports", state="pending") == 1
        assert of(found, "jobq_queue_jobs", database="jobs3", queue="archive", state="pending") is None
    finally:
        placed["jobs3"].start()
    fresh_figures.forget()
    assert of(samples(), "jobq_database_up", database="jobs3") == 1  # back, once it is


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_workers_counters_name_the_database_each_job_ran_on(placed):
    worker_metrics.connect()
    before = samples()
    for queue, n in (("default", 1), ("reports", 2), ("archive", 3)):
        for _ in range(n):
            Job.objects.enqueue("test.noop", queue=queue)
    group = WorkerGroup(
        lanes_by_database({"*": 2}), lambda its, worker_id: Worker(its, worker_id=worker_id, burst=True)
    )
    group.run()
    after = samples()
    for database, queue, n in (("default", "default", 1), ("jobs2", "reports", 2), ("jobs3", "archive", 3)):
        for name in ("jobq_jobs_started_total", "jobq_jobs_succeeded_total", "jobq_job_run_seconds_count"):
            labels = {"database": database, "queue": queue, "task": "test.noop"}
            assert (of(after, name, **labels) or 0) - (of(before, name, **labels) or 0) == n, (name, database)
            bare = {"queue": queue, "task": "test.noop"}  # counted with its database only
            assert (of(after, name, **bare) or 0) == (of(before, name, **bare) or 0), (name, queue)


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_job_waiting_in_an_outbox_is_a_figure_of_that_database(placed, fresh_figures, monkeypatch):
    monkeypatch.setattr(OutboxManager, "_relay_committed", lambda *args: None)  # the relay never came
    with transaction.atomic():  # on the home database, for a queue of jobs2: through its outbox
        Job.objects.enqueue("test.noop", queue="reports")
        Job.objects.enqueue("test.noop", queue="archive")
    found = samples()
    assert of(found, "jobq_outbox_jobs", database="default") == 2
    assert of(found, "jobq_outbox_jobs", database="jobs2") == 0
    assert of(found, "jobq_outbox_oldest_seconds", database="default") >= 0
    assert of(found, "jobq_outbox_oldest_seconds", database="jobs2") == 0
    snap = dashboard.snapshot()
    assert snap.outbox is not None and snap.outbox.jobs == 2 and snap.outbox.oldest_seconds is not None
