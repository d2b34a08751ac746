"""The queue's figures read from the database at scrape time, by a few bounded statements (each reads
a partial index or the catalogue, never the finished history: sql/*/stats.py ACTIVE, QUEUE_ROWS,
HEALTH, and WORKERS, the live workers' lanes, at most WORKERS_LIMIT rows),
at most once per JOBQ["METRICS_CACHE_SECONDS"] per process. The same figures on every endpoint that
serves them: aggregate with max(), never sum().

Every queue the figures know of has every per-queue series, zeros included (a rule comparing a figure
with an hour ago, or a stat panel, needs the zero as much as the count). The known queues, each found
without reading the finished history: JOBQ["QUEUES"]'s, jobq_queue's rows (queues paused once, or given
a depth baseline), the recently seen workers' lanes, the queues with PENDING, RUNNING, DEAD or WAITING
jobs, and on PostgreSQL those the planner's statistics of jobq_job.queue name (the catalogue).

A scrape never waits for the database longer than JOBQ["METRICS_TIMEOUT_SECONDS"]: the figures are read
on a thread of their own, on a connection of their own, bounded on the client side too (libpq's
connect timeout, TCP keepalives and tcp_user_timeout, so a link that stops forwarding ends the
connection) and on the server side (statement and lock timeouts). A scrape that does not get them in
time answers at once with jobq_database_up 0; concurrent scrapes share one read and wait for it no
longer than its deadline. A read that missed its deadline is left to end on its own (its connection is
closed then, never reused, its figures dropped); until it ends, scrapes answer jobq_database_up 0 at
once and no other read starts, so a hung link holds at most one thread and one connection."""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..conf import jobq_settings, on_database
from ..managers.seats import seats_database, task_seats
from ..registry import capped_tasks
from ..replica import read_alias, replica_lag
from ..shards import every_database
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
# jobq_table_bytes and jobq_oldest_transaction_seconds on PostgreSQL only, jobq_replica_lag_seconds
# only when the read alias is a standby, jobq_outbox_* with JOBQ["SHARDS"] only).
FAMILIES = (
    "jobq_database_up", "jobq_queue_jobs", "jobq_queue_due_jobs", "jobq_queue_expired_leases",
    "jobq_queue_lag_seconds", "jobq_queue_paused", "jobq_queue_unserved", "jobq_workers_alive",
    "jobq_reaper_lease_seconds_left", "jobq_table_bytes", "jobq_oldest_transaction_seconds",
    "jobq_fair_key_due_jobs", "jobq_fair_key_wait_seconds",
    "jobq_replica_lag_seconds", "jobq_outbox_jobs", "jobq_outbox_oldest_seconds",
)  # fmt: skip


class DatabaseCollector(Collector):
    """Collects FAMILIES; jobq_database_up is 0 when the figures could not be read in time (the others
    are left out, the scrape stands)."""

    def __init__(self, read: Callable[[], list[GaugeMetricFamily]] | None = None) -> None:
        self._read = read or read_figures  # the figures, on the reading thread
        self._lock = threading.Lock()
        self._read_at = -float("inf")  # time.monotonic() when the cached figures were read
        self._families: list[GaugeMetricFamily] = []
        self._reading: _Read | None = None  # the read in progress (or ended, not yet looked at)

    def forget(self) -> None:
        """Read the database again at the next scrape, whatever the cache's age."""
        with self._lock:
            self._read_at = -float("inf")

    def describe(self) -> list[Any]:
        return []  # the families depend on what the database holds: never collected at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._current()

    def _current(self) -> list[GaugeMetricFamily]:
        conf = jobq_settings()
        with self._lock:
            self._settle()
            if self._reading is None:
                if time.monotonic() - self._read_at < conf.metrics_cache_seconds:
                    return list(self._families)
                self._reading = _Read(self._read, conf.metrics_timeout_seconds)
            reading = self._reading
        reading.done.wait(max(0.0, reading.deadline - time.monotonic()))
        with self._lock:
            self._settle()
            if reading.in_time:
                return list(reading.families)
            first, reading.reported = not reading.reported, True
        if first:
            logger.warning(
                "metrics: the database did not answer within %s s (JOBQ['METRICS_TIMEOUT_SECONDS'])",
                conf.metrics_timeout_seconds,
            )
        return [_up(0)]

    def _settle(self) -> None:
        """Under the lock: an ended read's figures become the cache (dropped when it ended too late)."""
        reading = self._reading
        if reading is not None and reading.done.is_set():
            self._reading = None
            if reading.in_time:
                self._families, self._read_at = reading.families, reading.ended_at


class _Read:
    """One read of the figures, on a daemon thread of its own, started at once."""

    def __init__(self, read: Callable[[], list[GaugeMetricFamily]], timeout: float) -> None:
        self.deadline = time.monotonic() + timeout
        self.done = threading.Event()
        self.families: list[GaugeMetricFamily] = []
        self.ended_at = 0.0
        self.in_time = False  # ended by its deadline (set before done)
        self.reported = False  # a scrape logged that it missed its deadline
        self._read = read
        threading.Thread(target=self._run, name="jobq-metrics-read", daemon=True).start()

    def _run(self) -> None:
        try:
            self.families = self._read()
        except Exception as exc:  # closing the connection failed, say: still an answer
            logger.warning("metrics: could not read the queue's figures: %s", exc)
            self.families = [_up(0)]
        finally:
            self.ended_at = time.monotonic()
            self.in_time = self.ended_at <= self.deadline
            self.done.set()


def _up(value: int) -> GaugeMetricFamily:
    up = GaugeMetricFamily("jobq_database_up", "1 when the queue's figures were read from the database.")
    up.add_metric([], value)
    return up


def read_figures() -> list[GaugeMetricFamily]:
    """The figures: of the read alias (django_jobq.replica), or with JOBQ["SHARDS"] of every
    database at once, each series labelled with its ``database`` (jobq_database_up too: a database
    that cannot be read is 0 while the others are reported)."""
    conf = jobq_settings()
    if not conf.shards:
        return _read_one()
    reads: dict[str, Future[list[GaugeMetricFamily]]] = {}
    with _READS_LOCK:  # a database whose last read has not ended yet is not read again meanwhile
        for alias in every_database():
            if (running := _READS.get(alias)) is None or running.done():
                _READS[alias] = _READERS.submit(_read_on, alias)
            reads[alias] = _READS[alias]
    wait(reads.values(), timeout=SHARD_SHARE * conf.metrics_timeout_seconds)
    merged: dict[str, GaugeMetricFamily] = {}
    for alias, read in reads.items():
        families = read.result() if read.done() else [_up(0)]
        for family in families:
            family.samples = [
                sample._replace(labels={**sample.labels, "database": alias}) for sample in family.samples
            ]
            if family.name in merged:
                merged[family.name].samples += family.samples
            else:
                merged[family.name] = family
    return list(merged.values())


SHARD_SHARE = 0.8  # of the scrape's deadline, what the reads of every database are waited for
_READERS = ThreadPoolExecutor(thread_name_prefix="jobq-metrics-database")
_READS: dict[str, Future[list[GaugeMetricFamily]]] = {}  # each database's latest read
_READS_LOCK = threading.Lock()


def _read_on(alias: str) -> list[GaugeMetricFamily]:
    """_read_one() on ``alias`` (its own thread: the context is set here)."""
    with on_database(alias):
        return _read_one()


def _read_one() -> list[GaugeMetricFamily]:
    """The figures of the database this context works on, read from its read alias on a connection
    opened for this read and closed after it; jobq_database_up 0 alone when they could not be read."""
    conf = jobq_settings()
    wrapper = reading_connection(read_alias(), conf.metrics_timeout_seconds)
    try:
        if conf.pool_mode != "transaction":  # no session settings through a transaction pooler
            timeout = conf.metrics_timeout_seconds
            engine_of(wrapper).set_timeouts(wrapper, timeout, min(conf.lock_timeout, timeout))
        families = _figures(wrapper) + _replica(wrapper)
    except Exception as exc:  # a scrape never fails: the target says the database is not answering
        logger.warning("metrics: could not read the queue's figures: %s", exc)
        return [_up(0)]
    finally:
        wrapper.close()
    return [_up(1), *families]


def reading_connection(alias: str, timeout: float) -> BaseDatabaseWrapper:
    """A connection of its own to ``alias`` (not the thread's, never pooled), which on PostgreSQL gives
    up on an unreachable server after ``timeout`` (at least libpq's 2 s), and on a link that stops
    answering: keepalives probe an idle wait after ``timeout`` seconds, tcp_user_timeout ends the
    connection when sent data stays unacknowledged as long. The alias's own OPTIONS win."""
    wrapper = connections.create_connection(alias)
    if wrapper.vendor == "postgresql":
        seconds = max(2, math.ceil(timeout))
        options = {k: v for k, v in wrapper.settings_dict.get("OPTIONS", {}).items() if k != "pool"}
        bounds = {
            "connect_timeout": seconds, "keepalives": 1, "keepalives_idle": seconds,
            "keepalives_interval": 1, "keepalives_count": 3, "tcp_user_timeout": int(timeout * 1000),
        }  # fmt: skip
        wrapper.settings_dict = {**wrapper.settings_dict, "OPTIONS": {**bounds, **options}}
    return wrapper


def _figures(connection: BaseDatabaseWrapper) -> list[GaugeMetricFamily]:
    conf = jobq_settings()
    engine = engine_of(connection)
    params = {"now": timezone.now() if conf.clock == "python" else None}

    def run(statement: str, **extra: Any) -> list[tuple[Any, ...]]:
        return engine.run(connection, statement, {**params, **extra}).rows

    clock = run(engine.stats.DONE_ESTIMATE)  # the clock, and the queues the planner's statistics name
    now = engine.text_time(clock[0][0])
    active = run(engine.stats.ACTIVE)
    rows = run(engine.stats.QUEUE_ROWS)
    alive_for = ALIVE_HEARTBEATS * conf.heartbeat_seconds
    workers = run(engine.stats.WORKERS, recent=alive_for, limit=WORKERS_LIMIT)
    workers_alive, reaper_left, table_bytes, index_bytes, oldest_xact = run(
        engine.stats.HEALTH, alive=alive_for
    )[0]
    queues = (
        set(conf.queues)
        | {row[2] for row in clock if row[2] is not None}
        | {queue for queue, _ in rows}
        | (_lanes(workers, live_only=False) - {"*"})
        | {queue for _, queue, *_ in active}
    )
    counts = {(queue, state): 0 for queue in queues for state in STATES.values()}
    due = dict.fromkeys(queues, 0)
    lag = dict.fromkeys(queues, 0.0)
    expired = dict.fromkeys(queues, 0)
    for status, queue, count, flagged, oldest in active:
        counts[queue, STATES[JobStatus(status)]] = count
        if status == JobStatus.PENDING:
            due[queue] = flagged
            oldest = engine.text_time(oldest)
            lag[queue] = 0.0 if oldest is None or now is None else max(0.0, (now - oldest).total_seconds())
        elif status == JobStatus.RUNNING:
            expired[queue] = flagged
    paused = {queue for queue, is_paused in rows if is_paused}
    served = _lanes(workers, live_only=True)
    unserved = {
        q for q, n in due.items() if n > 0 and q not in paused and "*" not in served and q not in served
    }

    def per_queue(name: str, help_text: str, values: dict[str, Any]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, help_text, labels=("queue",))
        for queue in sorted(values):
            family.add_metric([queue], values[queue])
        return family

    jobs = GaugeMetricFamily("jobq_queue_jobs", "Jobs per queue and state (PENDING, RUNNING, DEAD, WAITING).",
                             labels=("queue", "state"))  # fmt: skip
    for (queue, state), count in sorted(counts.items()):
        jobs.add_metric([queue, state], count)
    alive = GaugeMetricFamily("jobq_workers_alive", "Worker processes with a recent heartbeat.")
    alive.add_metric([], workers_alive)
    families = [
        jobs,
        per_queue("jobq_queue_due_jobs", "PENDING jobs whose run_at has come.", due),
        per_queue("jobq_queue_expired_leases",
                  "RUNNING jobs whose lease has expired (the reaper will take them).", expired),
        per_queue("jobq_queue_lag_seconds", "Age of the oldest due PENDING job (0: none due).", lag),
        per_queue("jobq_queue_paused", "1 for a paused queue.", {q: int(q in paused) for q in queues}),
        per_queue("jobq_queue_unserved",
                  "1 for a queue with due jobs that no live worker's lanes serve (a paused queue is 0).",
                  {q: int(q in unserved) for q in queues}),
        alive,
    ]  # fmt: skip
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
        oldest_family = GaugeMetricFamily(
            "jobq_oldest_transaction_seconds",
            "Age of the oldest other transaction on the database holding back vacuum (0: none).",
        )
        oldest_family.add_metric([], oldest_xact or 0.0)
        families += [size, oldest_family]
    # a cap's seats are read on the database that holds them (managers/seats.py, seats_database)
    caps = {queue: cap for queue, cap in conf.caps().items() if seats_database(queue) == conf.database}
    capped = sorted(
        name for name, task in capped_tasks().items()
        if task.max_running is not None and seats_database(task_seats(name)) == conf.database
    )  # fmt: skip
    if caps or capped:
        held = dict(run(engine.stats.SEATS_HELD))
        families.append(
            per_queue("jobq_queue_seats_held",
                      "Seats of a capped queue (MAX_RUNNING) that workers hold: its jobs that may run at once.",
                      {q: held.get(q, 0) for q in caps})
        )  # fmt: skip
        tasks = GaugeMetricFamily(
            "jobq_task_seats_held",
            "Seats of a capped task (max_running) that workers hold: its jobs that may run at once.",
            labels=("task",),
        )
        for name in capped:
            tasks.add_metric([name], held.get(task_seats(name), 0))
        families.append(tasks)
    if conf.shards:  # the outbox of this database: jobs written for other databases, not relayed yet
        jobs, oldest = run(engine.stats.OUTBOX)[0]
        since = engine.text_time(oldest)
        waiting = GaugeMetricFamily(
            "jobq_outbox_jobs", "Jobs in this database's outbox, not relayed to their queue's database yet."
        )
        waiting.add_metric([], jobs)
        age = GaugeMetricFamily(
            "jobq_outbox_oldest_seconds",
            "How long the oldest job of this database's outbox has waited (0: none).",
        )
        age.add_metric([], 0.0 if since is None or now is None else max(0.0, (now - since).total_seconds()))
        families += [waiting, age]
    if conf.fair_queues() and now is not None:
        families += _fair_families(functools.partial(run, engine.stats.FAIR_KEYS), engine.text_time, now)
    return families


def _fair_families(
    read: Callable[..., list[tuple[Any, ...]]], time: Any, now: Any
) -> list[GaugeMetricFamily]:
    """The fair queues' busiest keys (at most TOP_KEYS per queue: the label values stay bounded), as
    ``read`` (FAIR_KEYS) gives them."""
    from ..fairness import SCAN_LIMIT, TOP_KEYS

    due = GaugeMetricFamily(
        "jobq_fair_key_due_jobs", "Due jobs of a fair queue's busiest keys (at most 10 keys per queue).",
        labels=("queue", "key"),
    )  # fmt: skip
    wait = GaugeMetricFamily(
        "jobq_fair_key_wait_seconds", "Age of the oldest due job of a fair queue's busiest keys.",
        labels=("queue", "key"),
    )  # fmt: skip
    for queue in sorted(jobq_settings().fair_queues()):
        for key, jobs, oldest, _ in read(queue=queue, top=TOP_KEYS, scan=SCAN_LIMIT):
            oldest = time(oldest)
            due.add_metric([queue, key], jobs)
            wait.add_metric([queue, key], 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
    return [due, wait]


def _replica(connection: BaseDatabaseWrapper) -> list[GaugeMetricFamily]:
    """jobq_replica_lag_seconds, when the figures come from a standby whose lag is known."""
    lag = replica_lag(connection)
    if lag is None or lag.seconds is None:
        return []
    family = GaugeMetricFamily(
        "jobq_replica_lag_seconds",
        "How far the standby these figures are read from is behind its primary (0: replayed all it received).",
    )
    family.add_metric([], lag.seconds)
    return [family]


def _lanes(workers: list[tuple[Any, ...]], *, live_only: bool) -> set[str]:
    """The queues the lanes of the recently seen workers name (of those not stopped, with
    ``live_only``); "*" among them when one serves every queue."""
    served: set[str] = set()
    for row in workers:
        lanes, stopped = row[3], row[8]
        if stopped is None or not live_only:
            served |= set(json.loads(lanes) if isinstance(lanes, str) else lanes or {})
    return served
