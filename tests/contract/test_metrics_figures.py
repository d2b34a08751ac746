"""The metrics' database figures on every engine (metrics.database): the statements exist under the same
names and give the same figures."""

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_jobq import metrics
from django_jobq.models import Job

pytestmark = [
    pytest.mark.contract,
    pytest.mark.django_db(transaction=True),
]  # read on a connection of its own


def test_the_database_figures():
    metrics.enable_database_metrics()
    metrics.database_collector().forget()
    Job.objects.enqueue("test.noop", queue="fig")
    Job.objects.enqueue("test.noop", queue="fig")
    Job.objects.claim("w1", queues=["fig"])
    Job.objects.pause_queue("fig")
    text = generate_latest(metrics.REGISTRY).decode()
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert found[("jobq_database_up", ())] == 1
    assert found[("jobq_queue_jobs", (("queue", "fig"), ("state", "pending")))] == 1
    assert found[("jobq_queue_jobs", (("queue", "fig"), ("state", "running")))] == 1
    assert found[("jobq_queue_due_jobs", (("queue", "fig"),))] == 1
    assert found[("jobq_queue_paused", (("queue", "fig"),))] == 1
    assert found[("jobq_workers_alive", ())] == 0
    metrics.database_collector().forget()
