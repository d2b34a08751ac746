"""What the workers of this process did, per queue and task: counters and histograms fed by the
worker's signals (django_jobq.signals), connected once by ``connect()``. Labels are the job's queue
and task names (bounded: names are registered tasks and configured lanes), never a job id; with
JOBQ["SHARDS"], the database whose worker ran the job too."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import signals
from ..conf import jobq_settings
from . import REGISTRY
from .tally import Tally

LABELS = ("queue", "task")
# Run and wait times from a millisecond to an hour.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

# The runs per queue and task (tally.py: no lock on the job path).
RUNS = Tally(
    counters={
        "jobq_jobs_started": "Runs started.",
        "jobq_jobs_succeeded": "Runs that ended DONE.",
        "jobq_jobs_retried": "Runs that failed, with a retry scheduled.",
        "jobq_jobs_dead": "Runs that ended DEAD (failed for good).",
        "jobq_jobs_cancelled": "Runs that ended CANCELLED (cancelled, discarded).",
        "jobq_jobs_snoozed": "Runs that raised Snooze.",
        "jobq_leases_lost": "Running jobs whose lease a heartbeat found lost (reaped, cut off).",
        "jobq_rate_limit_refusals": "Runs that found no rate-limit permit (the job waits for one).",
        "jobq_unknown_task_refusals": (
            "Jobs given back because this worker knows no task of their name (a rolling deploy: they wait "
            "for a worker that does)."
        ),
    },
    histograms={
        "jobq_job_run_seconds": "Run time of the runs that ended DONE.",
        "jobq_job_wait_seconds": (
            "From when a job was due (its run_at, or its enqueue if later) to the start of its run."
        ),
    },
    buckets=BUCKETS,
    labels=LABELS,
)
REGISTRY.register(RUNS)
CLAIMS = Counter("jobq_claims", "Claim statements a lane ran.", ("lane",), registry=REGISTRY)
CLAIMED = Counter(
    "jobq_claimed_jobs",
    "Jobs the lane's claims took (per claim: the batch size).",
    ("lane",),
    registry=REGISTRY,
)

PROBLEMS = Counter(
    "jobq_worker_problems",
    "Warnings and errors the worker, reaper or scheduler logged about their own work (heartbeats, claims, "
    "writes, the LISTEN connection), by module and level; a job's own failure is not one.",
    ("source", "level"),
    registry=REGISTRY,
)

_connected = threading.Event()
_connecting = threading.Lock()


class ProblemCounter(logging.Handler):
    """Counts the WARNING and ERROR records of the "django_jobq" logger into PROBLEMS, leaving out the
    records about a job's outcome (those carry the job's id in ``extra``: the job counters have them)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if not hasattr(record, "job_id"):
            PROBLEMS.labels(record.module, record.levelname.lower()).inc()


def _database() -> str:
    """The database label of a figure the worker counts now: the database its thread serves, with
    JOBQ["SHARDS"]; none ("") without."""
    conf = jobq_settings()
    return conf.database if conf.shards else ""


def _started(job: Any, **_: Any) -> None:
    queue, task, database = str(job.queue), str(job.task), _database()
    RUNS.count("jobq_jobs_started", queue, task, database=database)
    started, run_at, created = job.started_at, job.run_at, job.created_at
    if started is not None and run_at is not None:
        due = run_at if created is None or created <= run_at else created
        wait = max(0.0, (started - due).total_seconds())
        RUNS.observe("jobq_job_wait_seconds", queue, task, wait, database=database)


def _succeeded(job: Any, duration: float | None = None, **_: Any) -> None:
    queue, task, database = str(job.queue), str(job.task), _database()
    RUNS.count("jobq_jobs_succeeded", queue, task, database=database)
    if duration is not None:
        RUNS.observe("jobq_job_run_seconds", queue, task, duration, database=database)


def _claimed(lane: str, claimed: int, **_: Any) -> None:
    CLAIMS.labels(lane).inc()
    CLAIMED.labels(lane).inc(claimed)


def _counting(name: str) -> Any:
    def receive(job: Any, **_: Any) -> None:
        RUNS.count(name, str(job.queue), str(job.task), database=_database())

    return receive


_RECEIVERS = (
    (signals.job_started, _started),
    (signals.job_succeeded, _succeeded),
    (signals.job_retried, _counting("jobq_jobs_retried")),
    (signals.job_dead, _counting("jobq_jobs_dead")),
    (signals.job_cancelled, _counting("jobq_jobs_cancelled")),
    (signals.job_snoozed, _counting("jobq_jobs_snoozed")),
    (signals.job_lease_lost, _counting("jobq_leases_lost")),
    (signals.job_rate_limited, _counting("jobq_rate_limit_refusals")),
    (signals.job_task_unknown, _counting("jobq_unknown_task_refusals")),
    (signals.jobs_claimed, _claimed),
)


def connect() -> None:
    """Count this process's runs, and its own problems, from now on (idempotent)."""
    with _connecting:
        if _connected.is_set():
            return
        for signal, receiver in _RECEIVERS:
            signals.hook(signal, receiver)
        logging.getLogger("django_jobq").addHandler(ProblemCounter())
        _connected.set()


class LanesCollector(Collector):
    """A running worker's lanes at scrape time: jobq_lane_slots, jobq_lane_busy_slots and
    jobq_lane_stuck_slots (inside a job past its timeout), by lane (a queue name, or "*")."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        slots = GaugeMetricFamily("jobq_lane_slots", "Slots of a worker's lane.", labels=("lane",))
        busy = GaugeMetricFamily("jobq_lane_busy_slots", "Slots of a lane running a job.", labels=("lane",))
        stuck = GaugeMetricFamily(
            "jobq_lane_stuck_slots", "Slots of a lane inside a job past its timeout.", labels=("lane",)
        )
        for name, lane in list(self.worker.lanes.items()):
            slots.add_metric([name], lane.slots)
            busy.add_metric([name], lane.busy)
            stuck.add_metric([name], lane.stuck())
        yield from (slots, busy, stuck)


@contextmanager
def watching(worker: Any) -> Iterator[None]:
    """Serve ``worker``'s lanes (LanesCollector) while it runs."""
    collector = LanesCollector(worker)
    REGISTRY.register(collector)
    try:
        yield
    finally:
        REGISTRY.unregister(collector)
