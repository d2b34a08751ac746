"""The queue's figures, read-only: what the admin dashboard and ``manage.py jobq_stats`` show.

``snapshot()`` runs eight bounded statements (nine with the table's upkeep) (django_jobq.sql.postgres.stats) and returns a frozen
Snapshot; ``check()`` compares one with health thresholds; ``format_table()`` renders one for a terminal.
``unfinished_workflows()`` (dashboard.workflows) is the dashboard page's one more statement.
Every figure is read from the read alias (django_jobq.replica: a replica when one is configured), or
from the alias a caller passes as ``using``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql.compiler import SQLCompiler
from django.utils import timezone

from ..conf import home_database, jobq_settings
from ..managers.seats import seats_database
from ..models import Job
from ..registry import registered_tasks
from ..replica import ReplicaLag, read_alias, replica_lag
from ..sql import engine_of
from ..status import JobStatus
from .fairness import FairKey, fair_keys
from .limits import TaskLimits, format_rate, limited_tasks, task_limits
from .outbox import OutboxFigures as OutboxFigures  # re-exported
from .outbox import outbox_figures
from .table import TableFigures, table_figures
from .text import format_duration as format_duration  # re-exported: dashboard.format_duration
from .text import format_seconds as format_seconds  # re-exported: dashboard.format_seconds
from .text import format_table as format_table  # re-exported: dashboard.format_table
from .workers import ALIVE_HEARTBEATS as ALIVE_HEARTBEATS  # re-exported
from .workers import WORKERS_LIMIT as WORKERS_LIMIT  # re-exported
from .workers import SupervisorFigures as SupervisorFigures  # re-exported
from .workers import WorkerFigures as WorkerFigures  # re-exported
from .workers import worker_figures
from .workflows import WorkflowFigures as WorkflowFigures  # re-exported
from .workflows import unfinished_workflows as unfinished_workflows  # re-exported

# DONE jobs are counted while there are at most this many (a pass over at most that many rows); above
# it their number comes from the planner's statistics.
EXACT_LIMIT = 10_000
MINUTES = 60  # length of the throughput history, in one-minute buckets
FINISHED_NAMES = {JobStatus.DONE: "done", JobStatus.DEAD: "dead", JobStatus.CANCELLED: "cancelled"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueueFigures:
    """One queue's figures (or the sum over all queues, with queue "")."""

    queue: str
    pending: int = 0  # PENDING jobs, due now or scheduled later
    due: int = 0  # PENDING jobs whose run_at has come: the backlog workers should be taking
    lag: float | None = None  # seconds since the oldest due PENDING job became due; None: none due
    running: int = 0  # RUNNING jobs
    expired: int = 0  # RUNNING jobs whose lease has expired: their worker is gone, the reaper will retry them
    waiting: int = 0  # WAITING jobs: held until their dependencies finish (django_jobq.workflows)
    dead: int = 0  # DEAD jobs kept (the dead letters)
    done: int | None = 0  # DONE jobs kept; estimated when Snapshot.done_estimated; None: unknown
    done_5m: int = 0  # jobs finished DONE in the last 5 minutes
    done_60m: int = 0  # ... in the last 60 minutes
    dead_5m: int = 0  # jobs that went DEAD (failed for good) in the last 5 minutes
    dead_60m: int = 0  # ... in the last 60 minutes
    cancelled_5m: int = 0  # jobs that ended CANCELLED (cancelled, discarded) in the last 5 minutes
    cancelled_60m: int = 0  # ... in the last 60 minutes
    paused: bool = False  # workers claim nothing from it (Job.objects.pause_queue)
    max_depth: int | None = None  # JOBQ["QUEUES"][queue]["MAX_DEPTH"]: pending against it
    max_running: int | None = None  # JOBQ["QUEUES"][queue]["MAX_RUNNING"]: its seats
    seats: int | None = None  # a capped queue's seats held now: its jobs that may run at once
    rate_limit: str | None = None  # JOBQ["QUEUES"][queue]["RATE_LIMIT"], e.g. "10/s"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Minute:
    """Jobs finished in one minute of the last hour; ago=0 is the last 60 seconds."""

    ago: int
    done: int
    dead: int
    cancelled: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PausedQueue:
    """A paused queue: since when, and who paused it (a username, "manage.py jobq_queue", "api")."""

    queue: str
    since: dt.datetime
    by: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Every figure, read at one moment of the database clock."""

    now: dt.datetime
    queues: tuple[QueueFigures, ...]  # sorted by name
    total: QueueFigures  # sums over all queues; lag is the largest
    done_estimated: bool  # DONE counts come from planner statistics, not a count
    throughput: tuple[Minute, ...]  # MINUTES entries, oldest first
    workers: tuple[WorkerFigures, ...]  # most recently seen first
    unserved: tuple[str, ...]  # queues with due jobs that no live worker serves (by its lanes), not paused
    paused: tuple[PausedQueue, ...]  # sorted by name
    tasks: tuple[TaskLimits, ...]  # the registered tasks with a cap or a rate limit, by name
    table: TableFigures | None = None  # jobq_job's size and dead rows (PostgreSQL, when asked for)
    fair: tuple[FairKey, ...] = ()  # the fair queues' busiest keys (dashboard/fairness.py)
    replica: ReplicaLag | None = None  # read from a standby: how far behind; None: read from a primary
    outbox: OutboxFigures | None = None  # with JOBQ["SHARDS"]: the database's outbox; None: not read

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (timestamps as ISO 8601 strings)."""
        return _jsonable(dataclasses.asdict(self))  # type: ignore[no-any-return]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadGroup:
    """DEAD jobs of one task that died of one exception class."""

    task: str
    exception: str  # the job's exception column, e.g. "ValueError"; "" when none was recorded
    jobs: int
    last_finished_at: dt.datetime | None


class ExceptionClass(models.Func):
    """The exception class named by the last line of an error text: "ValueError: boom" -> "ValueError".

    A traceback's last line is "<class>: <message>"; the reaper's "lease expired: ..." gives
    "lease expired". Computed by the database (its engine's EXCEPTION_CLASS) so that the dead letters
    can be grouped and filtered by it.
    """

    output_field = models.TextField()

    def as_sql(
        self,
        compiler: SQLCompiler,
        connection: BaseDatabaseWrapper,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, tuple[str | int, ...]]:
        template = template or engine_of(connection).stats.EXCEPTION_CLASS
        return super().as_sql(compiler, connection, function, template, arg_joiner, **extra_context)


def snapshot(*, exact: bool = False, upkeep: bool = False, using: str | None = None) -> Snapshot:
    """Read every figure. ``exact=True`` counts DONE jobs even in a large table (a full pass);
    ``upkeep=True`` adds jobq_job's size, dead rows and last vacuum (one catalogue read). Read from
    ``using``, by default the read alias (django_jobq.replica)."""
    connection = connections[using or read_alias()]
    engine = engine_of(connection)  # refuses a database without an engine
    sql = engine.stats
    time = engine.text_time  # a time column as an aware datetime (SQLite returns text)
    estimate = _run(connection, sql.DONE_ESTIMATE)
    now = time(estimate[0][0])
    assert now is not None
    rows: float | None = estimate[0][1]
    shares = {queue: share for _, _, queue, share in estimate if queue is not None}

    figures: dict[str, dict[str, Any]] = defaultdict(dict)
    for status, queue, jobs, flagged, oldest in _run(connection, sql.ACTIVE):
        f = figures[queue]
        if status == JobStatus.PENDING:
            oldest = time(oldest)
            f.update(pending=jobs, due=flagged, lag=None if oldest is None else _seconds(now - oldest))
        elif status == JobStatus.RUNNING:
            f.update(running=jobs, expired=flagged)
        elif status == JobStatus.WAITING:
            f.update(waiting=jobs)
        else:
            f.update(dead=jobs)

    counted = _run(connection, sql.DONE_COUNT, limit=None if exact else EXACT_LIMIT + 1)
    done_estimated = sum(jobs for _, jobs in counted) > EXACT_LIMIT and not exact
    if done_estimated:
        for queue in shares:
            figures.setdefault(queue, {})  # a queue that only has DONE jobs is still listed
        for queue, f in figures.items():
            share = shares.get(queue)
            others = sum(f.get(name, 0) for name in ("pending", "running", "dead", "waiting"))
            f["done"] = None if rows is None or share is None else max(0, round(rows * share) - others)
    else:
        for queue, jobs in counted:
            figures[queue]["done"] = jobs

    buckets: dict[tuple[int, int], int] = defaultdict(int)  # (ago, status) -> jobs
    for queue, status, ago, jobs in _run(connection, sql.FINISHED):
        ago = min(max(ago, 0), MINUTES - 1)
        buckets[ago, status] += jobs
        f = figures[queue]
        name = FINISHED_NAMES[status]
        f[f"{name}_60m"] = f.get(f"{name}_60m", 0) + jobs
        if ago < 5:
            f[f"{name}_5m"] = f.get(f"{name}_5m", 0) + jobs

    paused = tuple(
        PausedQueue(queue=q, since=time(at), by=by)  # type: ignore[arg-type]
        for q, at, by in _run(connection, sql.PAUSED)
    )
    for p in paused:  # a paused queue is listed even without jobs, so that it can be resumed
        figures[p.queue]["paused"] = True
    caps = jobq_settings().caps()
    limited = limited_tasks()  # RUNNING_BY_TASK only runs when some task has a limit
    seated = caps or any(task.max_running is not None for _, task in limited)
    seats = dict(_run(connection, sql.SEATS_HELD)) if seated else {}
    here = jobq_settings().database  # a cap's seats are shown with the database that holds them
    for name, options in jobq_settings().queues.items():  # a configured queue, with its limits
        figures[name].update(
            max_depth=options.max_depth,
            max_running=options.max_running,
            seats=seats.get(name, 0) if name in caps and seats_database(name) == here else None,
            rate_limit=format_rate(options.rate_limit),
        )
    queues = tuple(QueueFigures(queue=queue, **figures[queue]) for queue in sorted(figures))
    throughput = tuple(
        Minute(
            ago=ago,
            done=buckets[ago, JobStatus.DONE],
            dead=buckets[ago, JobStatus.DEAD],
            cancelled=buckets[ago, JobStatus.CANCELLED],
        )
        for ago in reversed(range(MINUTES))
    )
    workers = worker_figures(connection)
    return Snapshot(
        now=now,
        queues=queues,
        total=total(queues),
        done_estimated=done_estimated,
        throughput=throughput,
        workers=workers,
        unserved=_unserved(queues, workers),
        paused=paused,
        tasks=task_limits(
            limited,
            dict(_run(connection, sql.RUNNING_BY_TASK)) if limited else {},
            seats if here == home_database() else None,
        ),
        table=table_figures(connection, {}) if upkeep else None,
        fair=fair_keys(connection, now),
        replica=replica_lag(connection),
        outbox=outbox_figures(connection, now) if jobq_settings().shards else None,
    )


def _unserved(queues: Sequence[QueueFigures], workers: Sequence[WorkerFigures]) -> tuple[str, ...]:
    """Queues with due jobs that no live worker's lanes name (a "*" lane serves every queue); a paused
    queue is not counted: nobody is meant to serve it."""
    served: set[str] = set()
    for w in workers:
        if w.state in ("alive", "stuck"):
            served |= set(w.lanes)
    if "*" in served:
        return ()
    return tuple(q.queue for q in queues if q.due and not q.paused and q.queue not in served)


def check(
    snap: Snapshot,
    *,
    max_lag: float | None = None,
    max_dead: int | None = None,
    max_due: int | None = None,
    max_expired: int | None = None,
    max_xact_age: float | None = None,
) -> list[str]:
    """The thresholds ``snap`` crosses, one sentence each; empty when the queue is healthy.
    ``max_xact_age`` reads the table's upkeep (a snapshot taken with ``upkeep=True``, PostgreSQL)."""
    problems = []
    for q in snap.queues:
        if max_lag is not None and q.lag is not None and q.lag > max_lag:
            problems.append(f"queue {q.queue}: lag {q.lag:.0f}s > {max_lag:g}s")
        if max_due is not None and q.due > max_due:
            problems.append(f"queue {q.queue}: {q.due} due jobs > {max_due}")
    if max_dead is not None and snap.total.dead > max_dead:
        problems.append(f"{snap.total.dead} dead jobs > {max_dead}")
    if max_expired is not None and snap.total.expired > max_expired:
        problems.append(f"{snap.total.expired} running jobs with an expired lease > {max_expired}")
    oldest = snap.table.oldest_xact_seconds if snap.table is not None else None
    if max_xact_age is not None and oldest is not None and oldest > max_xact_age:
        problems.append(f"a transaction open {oldest:.0f}s > {max_xact_age:g}s holds back vacuum")
    return problems


def dead_letter_groups(limit: int = 50, using: str | None = None) -> list[DeadGroup]:
    """DEAD jobs grouped by task and exception class, largest groups first (at most ``limit``).

    Reads the DEAD rows through the jobq_job_dead index: the cost follows the dead letters kept.
    """
    return [
        DeadGroup(**{**row, "exception": row["exception"] or ""}) for row in dead_letter_query(using)[:limit]
    ]


def dead_letter_query(using: str | None = None) -> models.QuerySet[Any, Any]:
    """The grouping query of dead_letter_groups (task, exception, jobs, last_finished_at), unsliced.
    The exception is the column the statement that made each job DEAD wrote (a key of jobq_job_dead)."""
    return (
        Job.objects.using(using or read_alias())
        .filter(status=JobStatus.DEAD)
        .values("task", "exception")
        # count(*), not count(id): every column read is in jobq_job_dead (finished_at included), so an
        # index-only scan answers it without a visit to the dead jobs' rows
        .annotate(jobs=models.Count("*"), last_finished_at=models.Max("finished_at"))
        .order_by("-jobs", "task", "exception")
    )


def dead_letter_names(limit: int = 500, using: str | None = None) -> tuple[list[str], list[str]]:
    """(queues, tasks) that have dead letters: the dead-letter page's filters.

    One DISTINCT over the (queue, task) pairs of the DEAD rows, read index-only and in order from
    jobq_job_dead (partial on DEAD, on exactly those columns), at most ``limit`` pairs: the cost follows
    the dead letters kept, never the DONE history.
    """
    dead = Job.objects.using(using or read_alias()).filter(status=JobStatus.DEAD)
    pairs = dead.order_by("queue", "task").values_list("queue", "task").distinct()[:limit]
    queues, tasks = set(), set()
    for queue, task in pairs:
        queues.add(queue)
        tasks.add(task)
    return sorted(queues), sorted(tasks)


def filter_names(limit: int = 500, using: str | None = None) -> tuple[list[str], list[str]]:
    """(queues, tasks) worth offering as admin filters, read from bounded indexes and the registry.

    Queues: those with PENDING, RUNNING or DEAD jobs, plus the registered tasks' queues. Tasks: the
    registered ones plus those with dead letters. A name missing here can still be filtered on by URL.
    """
    connection = connections[using or read_alias()]
    queues, tasks = set(), set()
    for task in registered_tasks().values():
        queues.add(task.queue)
        tasks.add(task.name)
    for kind, name in _run(connection, engine_of(connection).stats.FILTER_NAMES, limit=limit):
        (queues if kind == "queue" else tasks).add(name)
    return sorted(queues), sorted(tasks)


def _run(connection: BaseDatabaseWrapper, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    params["now"] = timezone.now() if jobq_settings().clock == "python" else None
    return engine_of(connection).run(connection, statement, params).rows


def _seconds(delta: dt.timedelta) -> float:
    return max(0.0, delta.total_seconds())


def total(queues: Sequence[QueueFigures]) -> QueueFigures:
    """The sums over ``queues`` (queue ""): the largest lag, no limits."""
    sums: dict[str, Any] = {}
    for field in dataclasses.fields(QueueFigures):
        name = field.name
        values = [getattr(q, name) for q in queues]
        if name == "queue":
            sums[name] = ""
        elif name == "lag":
            lags = [v for v in values if v is not None]
            sums[name] = max(lags) if lags else None
        elif name == "done":
            sums[name] = None if None in values else sum(values)
        elif name == "paused":
            sums[name] = False
        elif name in ("max_depth", "max_running", "seats", "rate_limit"):  # limits are per queue
            sums[name] = None
        else:
            sums[name] = sum(values)
    return QueueFigures(**sums)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value
