"""The queue's figures read from the database at scrape time, by a few bounded statements (each reads
a partial index or the catalogue, never the finished history: sql/*/stats.py ACTIVE, PAUSED, HEALTH,
and WORKERS, the live workers' lanes, at most WORKERS_LIMIT rows),
at most once per JOBQ["METRICS_CACHE_SECONDS"] per process. The same figures on every endpoint that
serves them: aggregate with max(), never sum()."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.db import connections
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..conf import jobq_settings
from ..sql import engine_of
from ..status import JobStatus

logger = logging.getLogger("django_jobq")

ALIVE_HEARTBEATS = 3  # a worker is alive while its last heartbeat is younger than this many intervals
WORKERS_LIMIT = 500  # live workers read for jobq_queue_unserved (a "*" lane among them serves every queue)
STATES = {
    JobStatus.PENDING: "pending", JobStatus.RUNNING: "running", JobStatus.DEAD: "dead",
    JobStatus.WAITING: "waiting",
}  # fmt: skip
# Every family the collector may give (jobq_reaper_lease_seconds_left only once a reaper ran,
# jobq_table_bytes and jobq_oldest_transaction_seconds on PostgreSQL only).
FAMILIES = (
    "jobq_database_up", "jobq_queue_jobs", "jobq_queue_due_jobs", "jobq_queue_expired_leases",
    "jobq_queue_lag_seconds", "jobq_queue_paused", "jobq_queue_unserved", "jobq_workers_alive",
    "jobq_reaper_lease_seconds_left", "jobq_table_bytes", "jobq_oldest_transaction_seconds",
)  # fmt: skip


class DatabaseCollector(Collector):
    """Collects FAMILIES; jobq_database_up is 0 when the figures could not be read (the others are left
    out, the scrape stands)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._families: list[GaugeMetricFamily] = []

    def forget(self) -> None:
        """Read the database again at the next scrape, whatever the cache's age."""
        with self._lock:
            self._read_at = -float("inf")

    def describe(self) -> list[Any]:
        return []  # the families depend on what the database holds: never collected at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:  # concurrent scrapes share one read
            if time.monotonic() - self._read_at >= jobq_settings().metrics_cache_seconds:
                self._families = self._read()
                self._read_at = time.monotonic()
            families = list(self._families)
        yield from families

    def _read(self) -> list[GaugeMetricFamily]:
        up = GaugeMetricFamily("jobq_database_up", "1 when the queue's figures were read from the database.")
        try:
            families = self._figures()
        except Exception as exc:  # a scrape never fails: the target says the database is not answering
            logger.warning("metrics: could not read the queue's figures: %s", exc)
            up.add_metric([], 0)
            return [up]
        finally:  # a scrape may come on a thread of its own (the metrics server's): leave no connection open
            connection = connections[jobq_settings().database]
            if not connection.in_atomic_block:
                connection.close()
        up.add_metric([], 1)
        return [up, *families]

    def _figures(self) -> list[GaugeMetricFamily]:
        conf = jobq_settings()
        connection = connections[conf.database]
        engine = engine_of(connection)
        params = {"now": timezone.now() if conf.clock == "python" else None}

        def run(statement: str, **extra: Any) -> list[tuple[Any, ...]]:
            return engine.run(connection, statement, {**params, **extra}).rows

        jobs = GaugeMetricFamily("jobq_queue_jobs", "Jobs per queue and state (PENDING, RUNNING, DEAD, WAITING).",
                                 labels=("queue", "state"))  # fmt: skip
        due = GaugeMetricFamily(
            "jobq_queue_due_jobs", "PENDING jobs whose run_at has come.", labels=("queue",)
        )
        expired = GaugeMetricFamily(
            "jobq_queue_expired_leases", "RUNNING jobs whose lease has expired (the reaper will take them).",
            labels=("queue",),
        )  # fmt: skip
        lag = GaugeMetricFamily(
            "jobq_queue_lag_seconds", "Age of the oldest due PENDING job (0: none due).", labels=("queue",)
        )
        now = engine.text_time(run(engine.stats.DONE_ESTIMATE)[0][0])
        due_by_queue: dict[str, int] = {}
        for status, queue, count, flagged, oldest in run(engine.stats.ACTIVE):
            jobs.add_metric([queue, STATES[JobStatus(status)]], count)
            if status == JobStatus.PENDING:
                due_by_queue[queue] = flagged
                due.add_metric([queue], flagged)
                oldest = engine.text_time(oldest)
                age = 0.0 if oldest is None or now is None else max(0.0, (now - oldest).total_seconds())
                lag.add_metric([queue], age)
            elif status == JobStatus.RUNNING:
                expired.add_metric([queue], flagged)
        paused = GaugeMetricFamily("jobq_queue_paused", "1 for a paused queue.", labels=("queue",))
        paused_queues = {queue for queue, *_ in run(engine.stats.PAUSED)}
        for queue in paused_queues:
            paused.add_metric([queue], 1)
        alive_for = ALIVE_HEARTBEATS * conf.heartbeat_seconds
        served = _served(run(engine.stats.WORKERS, recent=alive_for, limit=WORKERS_LIMIT))
        unserved = GaugeMetricFamily(
            "jobq_queue_unserved",
            "1 for a queue with due jobs that no live worker's lanes serve (a paused queue is 0).",
            labels=("queue",),
        )
        for queue, flagged in due_by_queue.items():
            gone = flagged > 0 and queue not in paused_queues and "*" not in served and queue not in served
            unserved.add_metric([queue], int(gone))
        workers, reaper_left, table_bytes, index_bytes, oldest_xact = run(
            engine.stats.HEALTH, alive=alive_for
        )[0]
        alive = GaugeMetricFamily("jobq_workers_alive", "Worker processes with a recent heartbeat.")
        alive.add_metric([], workers)
        families = [jobs, due, expired, lag, paused, unserved, alive]
        if reaper_left is not None:
            reaper = GaugeMetricFamily(
                "jobq_reaper_lease_seconds_left",
                "Seconds left on the reaper's lease (negative: no reaper holds it).",
            )
            reaper.add_metric([], reaper_left)
            families.append(reaper)
        if table_bytes is not None:
            size = GaugeMetricFamily("jobq_table_bytes", "Size of jobq_job on disk.", labels=("part",))
            size.add_metric(["table"], table_bytes)
            size.add_metric(["indexes"], index_bytes)
            oldest = GaugeMetricFamily(
                "jobq_oldest_transaction_seconds",
                "Age of the oldest other transaction on the database holding back vacuum (0: none).",
            )
            oldest.add_metric([], oldest_xact or 0.0)
            families += [size, oldest]
        return families


def _served(workers: list[tuple[Any, ...]]) -> set[str]:
    """The queues the lanes of the live (not stopped) workers name; "*" when one serves every queue."""
    served: set[str] = set()
    for row in workers:
        lanes, stopped = row[3], row[8]
        if stopped is None:
            served |= set(json.loads(lanes) if isinstance(lanes, str) else lanes or {})
    return served
