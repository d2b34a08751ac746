"""JobContext: what a task with ``takes_context=True`` receives as its first argument."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .outcomes import Cancelled
from .status import JobStatus


class CancelSignal:
    """Set once when a cancel is asked of a running job (the worker's heartbeat learns of it); calls
    the hooks registered meanwhile (an ``async def`` task's cancellation), each at most once. Cheap
    to make (one per run): its Event exists only once asked for (a task's context) or set."""

    _guard = threading.Lock()  # shared: setting a signal and registering a hook are rare

    __slots__ = ("_event", "_hooks", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None
        self._hooks: list[Callable[[], object]] = []

    @property
    def event(self) -> threading.Event:
        with self._guard:
            if self._event is None:
                self._event = threading.Event()
                if self._set:
                    self._event.set()
            return self._event

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._guard:
            if self._set:
                return
            self._set = True
            if self._event is not None:
                self._event.set()
            hooks, self._hooks = self._hooks, []
        for hook in hooks:
            hook()

    def on_set(self, hook: Callable[[], object]) -> Callable[[], None]:
        """Call ``hook`` when the signal is set (at once if it is); returns what unregisters it."""
        with self._guard:
            if not self._set:
                self._hooks.append(hook)
                return lambda: self._discard(hook)
        hook()
        return lambda: None

    def _discard(self, hook: Callable[[], object]) -> None:
        with self._guard:
            if hook in self._hooks:
                self._hooks.remove(hook)


@dataclass(frozen=True, slots=True)
class DependencyResult:
    """One dependency of a job, as it ended."""

    job_id: int
    task: str
    status: str  # "DONE", "DEAD" or "CANCELLED" ("PENDING"/"RUNNING" only after a requeue of it)
    result: Any  # its task's return value when DONE, else None
    error: str | None  # its last error when it did not succeed

    @property
    def succeeded(self) -> bool:
        return self.status == "DONE"


@dataclass(slots=True, kw_only=True)
class JobContext:
    job_id: int
    task: str
    attempt: int
    max_attempts: int
    worker_id: str
    fence: int  # this run's fencing token
    dedupe_key: str | None = None  # the job's dedupe key ("schedule:NAME:TICK" for a schedule's job)
    # Runs the writes below on the worker's own connection, outside the task's transaction (so a task
    # inside transaction.atomic() never holds its job row locked against heartbeats and the reaper).
    side_write: Callable[[Callable[[], bool]], bool] | None = None
    job: Any = None  # the Job as claimed (the columns a claim returns)
    # Set (within a heartbeat) once a cancel was asked of this job: a long task checks it, or calls
    # check_cancelled(), and stops; the run ends CANCELLED whatever it returns.
    cancelled: threading.Event = field(default_factory=threading.Event)

    def check_cancelled(self) -> None:
        """Raise django_jobq.Cancelled if a cancel was asked of this job."""
        if self.cancelled.is_set():
            raise Cancelled(f"job {self.job_id} was cancelled")

    @property
    def scheduled_for(self) -> dt.datetime | None:
        """The tick (aware, UTC) a schedule's job was published for, or when it was run now from the
        admin; None for a job no schedule published."""
        from .ticks import tick_of

        return tick_of(self.dedupe_key)

    def dependency_results(self) -> list[DependencyResult]:
        """What this job waited for (django_jobq.workflows): one entry per dependency, in id order,
        with its state, its result (DONE) or its last error (DEAD, CANCELLED). Empty for a job
        without dependencies. In a chain, the one entry is the previous step."""
        from .models import Dependency, Job
        from .shards import database_of_job

        database = database_of_job(self.job_id)  # its own database, never a replica's older rows
        edges = Dependency.objects.using(database).filter(dependent_id=self.job_id)
        ids = edges.values_list("dependency_id", flat=True)
        rows = Job.objects.using(database).filter(id__in=list(ids)).order_by("id")
        return [
            DependencyResult(job.id, job.task, JobStatus(job.status).name, job.result, job.last_error)
            for job in rows.only("id", "task", "status", "result", "last_error")
        ]

    def set_progress(self, done: float, total: float | None = None) -> bool:
        """Record progress (shown by the admin); False if this run no longer owns the job."""
        from .models import Job

        return self._write(
            lambda: Job.objects.set_progress(self.job_id, self.worker_id, self.fence, done, total)
        )

    def renew_lease(self, lease_seconds: float | None = None) -> bool:
        """Set the lease to now + ``lease_seconds`` (default JOBQ["LEASE_SECONDS"]); heartbeats never
        shorten it. False if this run no longer owns the job."""
        from .models import Job

        return self._write(
            lambda: Job.objects.renew_lease(self.job_id, self.worker_id, lease_seconds, fence=self.fence)
        )

    def _write(self, op: Callable[[], bool]) -> bool:
        if self.side_write is not None:  # the worker's side writer, on the job's database
            return self.side_write(op)
        from .shards import database_of_job, on_shard

        with on_shard(database_of_job(self.job_id)):
            return op()
