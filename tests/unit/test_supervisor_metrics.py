"""supervisor/metrics.py: the supervisor's endpoint reads each running process's own metrics page and
labels its samples with the process's worker id; a process that has not said its port yet, or does not
answer, is reported down; the endpoint never sums counters across processes."""

from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter, start_http_server

from django_jobq.supervisor.metrics import Federation
from tests.integration.test_metrics import free_port

pytestmark = [pytest.mark.unit, pytest.mark.p1]


def samples(collector: Federation) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }


def supervisor(ports: list) -> SimpleNamespace:
    return SimpleNamespace(
        metrics_ports=lambda: ports,
        target=len(ports),
        children=ports,
        started=len(ports),
        unplanned=0,
        recycled={},
    )


def test_each_process_is_its_own_series_and_one_not_yet_serving_is_down() -> None:
    registry = CollectorRegistry()
    Counter("jobq_jobs_succeeded", "runs", registry=registry).inc(7)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        dead_port = free_port()  # nothing listens there
        figures = samples(Federation(supervisor([("w/1", port), ("w/2", None), ("w/3", dead_port)])))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert figures[("jobq_jobs_succeeded_total", (("worker", "w/1"),))] == 7
    assert not any(
        name == "jobq_jobs_succeeded_total" and labels != (("worker", "w/1"),) for name, labels in figures
    )
    assert {w: figures[("jobq_supervisor_worker_up", (("worker", w),))] for w in ("w/1", "w/2", "w/3")} == {
        "w/1": 1,
        "w/2": 0,
        "w/3": 0,
    }
    assert figures[("jobq_supervisor_processes", ())] == 3
