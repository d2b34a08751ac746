"""A supervisor's metrics endpoint (``jobq_worker --processes N --metrics-port P``): every worker
process serves its own figures on a local port of its own (it tells the supervisor which, link.METRICS),
and a scrape of the supervisor's port reads each live process's figures and gives them all, each
sample labelled with its process's worker id (``worker``), with the supervisor's own figures.

Counters are never summed here: a process that ends takes its series with it, and a sum would then
fall, which Prometheus reads as a reset. Each process is its own series, and the query sums the rates
(``sum without (worker) (rate(jobq_jobs_succeeded_total[5m]))``), as Prometheus does for any set of
processes. The figures are the processes' own (prometheus-client's exposition, parsed with its parser)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .core import Supervisor

FETCH_SECONDS = 2.0  # a process that does not answer within this is reported down for the scrape
LABEL = "worker"


def read(port: int) -> str:
    """The exposition a worker process serves on 127.0.0.1:``port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=FETCH_SECONDS) as response:
        return str(response.read().decode("utf-8"))


class Federation(Collector):
    """The supervisor's processes' figures, labelled by worker id, and the supervisor's own."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        s = self.supervisor
        up = GaugeMetricFamily(
            "jobq_supervisor_worker_up", "1 when a running worker process's figures were read by this scrape, 0 when not (starting, hung).",
            labels=(LABEL,),
        )  # fmt: skip
        merged: dict[tuple[str, str], Metric] = {}
        for worker_id, port in s.metrics_ports():
            try:
                families = [] if port is None else list(text_string_to_metric_families(read(port)))
            except (OSError, ValueError):  # ended, hung, or not a metrics page
                port = None
            if port is None:  # down, or started and not yet serving its figures
                up.add_metric([worker_id], 0)
                continue
            up.add_metric([worker_id], 1)
            for family in families:
                key = (family.name, family.type)
                if (into := merged.get(key)) is None:
                    into = merged[key] = Metric(family.name, family.documentation, family.type)
                for sample in family.samples:
                    into.add_sample(
                        sample.name, {**sample.labels, LABEL: worker_id}, sample.value, sample.timestamp
                    )
        yield from merged.values()
        yield up
        yield from _own(s)


def _own(s: Supervisor) -> Iterator[Metric]:
    wanted = GaugeMetricFamily("jobq_supervisor_processes", "Worker processes the supervisor keeps running.")
    wanted.add_metric([], s.target)
    alive = GaugeMetricFamily("jobq_supervisor_processes_running", "Worker processes running now.")
    alive.add_metric([], len(s.children))
    started = CounterMetricFamily("jobq_supervisor_started", "Worker processes started.")
    started.add_metric([], s.started)
    unplanned = CounterMetricFamily(
        "jobq_supervisor_unplanned_exits",
        "Worker processes that ended unasked (crashed, stuck lane, killed).",
    )
    unplanned.add_metric([], s.unplanned)
    recycled = CounterMetricFamily(
        "jobq_supervisor_recycled", "Worker processes replaced for --max-jobs, --max-memory or a reload.",
        labels=("reason",),
    )  # fmt: skip
    for reason, count in sorted(s.recycled.items()):
        recycled.add_metric([reason], count)
    yield from (wanted, alive, started, unplanned, recycled)


def serve(supervisor: Supervisor, port: int, addr: str) -> Any:
    """Serve the supervisor's endpoint at http://addr:port/metrics on a daemon thread; the server."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Federation(supervisor))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server
