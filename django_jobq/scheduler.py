"""The scheduler: publishes each due tick of every schedule once, however many replicas run.

A pass is one transaction on the queue's database: it locks the due schedules (FOR UPDATE SKIP
LOCKED: replicas split the rows and never wait on each other), works out in Python which ticks to
publish under each schedule's missed-tick policy (django_jobq.ticks over django_jobq.cron), records
those ticks in jobq_schedule_tick, whose primary key (schedule, tick) refuses a tick recorded before,
enqueues one job per newly recorded tick through the manager's enqueue (the usual checks; dedupe key
"schedule:NAME:TICK"), and moves every next_run_at to the first tick after the pass's clock.
Everything commits together or not at all: a crash mid-pass leaves neither a job nor a tick.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import Error as DatabaseError
from django.db import connections, transaction
from django.utils import timezone

from . import cron, shards, ticks
from .conf import home_database, jobq_settings, on_database
from .exceptions import ConfigurationError, JobqError
from .managers.schedules import DueSchedule
from .models import Job, Schedule
from .registry import find_task
from .sql import engine_for

logger = logging.getLogger("django_jobq")

DEFAULT_INTERVAL = 1.0  # seconds between passes of the long-running loop
BATCH = 500  # schedules locked per transaction; a pass repeats until fewer are due
MAX_BATCHES = 20  # per pass, so one pass never runs unbounded
TICK_RETENTION_SECONDS = 35 * 24 * 3600  # how long a published tick is remembered


@dataclass(slots=True)
class PassResult:
    published: dict[str, list[dt.datetime]] = field(default_factory=dict)  # name -> ticks, oldest first
    job_ids: list[int] = field(default_factory=list)
    started: list[str] = field(default_factory=list)  # schedules given their first next_run_at
    failed: dict[str, str] = field(default_factory=dict)  # name -> why its job could not be enqueued

    @property
    def jobs(self) -> int:
        return len(self.job_ids)


class Scheduler:
    """Publishes due ticks: run_once() for one pass, run() until stopped; sync() writes the settings'
    schedules into the table (run() does it at start-up)."""

    def __init__(self, *, interval: float | None = None, batch: int = BATCH) -> None:
        self.interval = DEFAULT_INTERVAL if interval is None else interval
        if not self.interval > 0 or not 1 <= batch <= 10_000:
            raise ConfigurationError("the scheduler's interval must be positive and its batch 1..10000")
        engine_for(jobq_settings().database).capabilities.require("scheduler", "the scheduler")
        self.batch = batch

    @property
    def grace(self) -> dt.timedelta:
        """How late a tick may be published and still count as on time: JOBQ["SCHEDULE_GRACE_SECONDS"],
        at least two intervals (a tick is always seen on time by a loop that keeps running)."""
        return dt.timedelta(seconds=max(jobq_settings().schedule_grace_seconds, 2 * self.interval))

    def sync(self) -> None:
        """Write JOBQ["SCHEDULES"] into the table (unchanged rows untouched; removed ones disabled)."""
        Job.objects.bound_statements()
        with transaction.atomic(using=jobq_settings().database):
            written, disabled = Job.objects.sync_schedules(jobq_settings().schedules.values())
        if written or disabled:
            logger.info("scheduler: settings schedules written %s, disabled %s", written, disabled)

    def run_once(self) -> PassResult:
        """Publish every due tick (repeating while a full batch was due) and advance the schedules.
        A schedule left due (its enqueue failed) is tried once per pass: the later batches leave it
        out, so however many keep failing, they never keep the pass from the schedules after them."""
        Job.objects.bound_statements()
        result = PassResult()
        tried: list[int] = []
        for _ in range(MAX_BATCHES):
            with transaction.atomic(using=jobq_settings().database):
                due = Job.objects.due_schedules(self.batch, tried)
                tried += self._publish(due, result)
            if len(due) < self.batch:
                break
        return result

    def _publish(self, due: list[DueSchedule], result: PassResult) -> list[int]:
        """Publish and advance ``due``; the ids of the schedules left due (their enqueue failed)."""
        conf, names, failed = jobq_settings(), [], []
        moves: list[tuple[int, dt.datetime, dt.datetime | None]] = []
        for schedule in due:
            zone = ticks.zone_for(schedule.timezone, conf.timezone)
            try:
                following = cron.next_run(schedule.spec, schedule.now, zone)
                if schedule.next_run_at is None:  # new, edited or re-enabled: from its next tick after now
                    moves.append((schedule.id, following, None))
                    result.started.append(schedule.name)
                    continue
                policy = ticks.parse_missed(schedule.missed)
                wanted = ticks.due_ticks(
                    schedule.spec, zone, schedule.next_run_at, schedule.now, policy, self.grace
                )
                with transaction.atomic(using=conf.database):  # a savepoint: one schedule's failure
                    published = self._enqueue(schedule, wanted, result)
            except JobqError as exc:
                # Left due: retried on the next pass, until its ticks are missed under its policy.
                logger.error("scheduler: schedule %s could not publish: %s", schedule.name, exc)
                result.failed[schedule.name] = str(exc)
                failed.append(schedule.id)
                continue
            moves.append((schedule.id, following, published[-1] if published else None))
            if published:
                names.append(schedule.name)
                result.published[schedule.name] = published
        Job.objects.advance_schedules(moves)
        Job.objects.prune_ticks(names, TICK_RETENTION_SECONDS)
        return failed

    @staticmethod
    def _enqueue(schedule: DueSchedule, wanted: list[dt.datetime], result: PassResult) -> list[dt.datetime]:
        recorded = Job.objects.record_ticks(schedule.name, wanted)
        jobs: dict[dt.datetime, int | None] = {}
        for tick in recorded:
            # On a queue of another database (django_jobq.shards) the job commits before the tick: a
            # pass whose transaction then rolls back publishes the tick again, and its key (per tick)
            # makes that enqueue a no-op, so each tick still has exactly one job.
            key = ticks.tick_key(schedule.name, tick)
            with shards.idempotent(), _its_database_fails(schedule, key):
                job_id = Job.objects.enqueue(
                    schedule.task,
                    schedule.payload,
                    queue=schedule.queue,
                    priority=schedule.priority,
                    dedupe_key=key,
                )
            jobs[tick] = job_id
            if job_id is not None:
                result.job_ids.append(job_id)
        Job.objects.set_tick_jobs(schedule.name, jobs)
        return recorded

    def run(self, stopping: threading.Event) -> None:
        """Sync the settings' schedules, then pass every ``interval`` until ``stopping`` is set. On the
        home database, whichever database's worker runs it (django_jobq.shards)."""
        with on_database(None):
            self._run(stopping)

    def _run(self, stopping: threading.Event) -> None:
        synced = False
        while not stopping.is_set():
            try:
                if not synced:
                    self.sync()
                    synced = True
                self.run_once()
            except DatabaseError as exc:
                logger.warning("scheduler: database error (%s); retrying", exc)
                connections[jobq_settings().database].close()
            stopping.wait(self.interval)


@contextlib.contextmanager
def _its_database_fails(schedule: DueSchedule, key: str) -> Iterator[None]:
    """A DatabaseError of a tick whose job goes to a shard (its queue's database, or for a spread
    queue the one its tick key ``key`` places it on) as a JobqError: that schedule is left due (its
    pass's savepoint on the home database is intact: the error was the shard's) and the others
    publish; the shard's connection is closed, so the next pass connects again."""
    try:
        yield
    except DatabaseError as exc:
        queue = str(schedule.queue or getattr(find_task(schedule.task), "queue", None) or "default")
        database = shards.database_for(queue, key)
        if database == home_database():
            raise
        connections[database].close()
        raise JobqError(f"its queue's database {database!r} failed: {exc}") from exc


def run_now(schedule: Schedule) -> int | None:
    """Enqueue one job of ``schedule`` now, outside its ticks (next_run_at stays); the job's id, or
    None if one was already run now this second. Its dedupe key is "schedule:NAME:now:TIME"."""
    now = timezone.now().replace(microsecond=0)
    return Job.objects.enqueue(
        schedule.task,
        schedule.payload,
        queue=schedule.queue,
        priority=schedule.priority,
        dedupe_key=ticks.tick_key(f"{schedule.name}:now", now),
    )
