"""JobManager: each public operation runs one named statement from django_jobq.sql."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import psycopg
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from . import validation
from .conf import jobq_settings
from .exceptions import InvalidJob
from .sql import statements_for
from .tasks import find_task, get_task

if TYPE_CHECKING:
    from .models import Job, JobStatus


class _QueueCursor(psycopg.Cursor[Any]):
    """Server-side binding (so large arrays can travel in binary, %(name)b), every statement prepared
    unless JOBQ["PREPARED_STATEMENTS"] is off: the queue's few statements run thousands of times per
    connection, so planning them once matters on the claim path. Django leaves the connection's
    prepare_threshold at None (never prepare); it is lifted for this cursor's statements only, so the
    application's own queries keep Django's behaviour."""

    def __init__(self, connection: psycopg.Connection[Any], *, prepare: bool) -> None:
        super().__init__(connection)
        self._prepare = prepare

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        conn = self.connection
        saved = conn.prepare_threshold
        if self._prepare and saved is None:
            conn.prepare_threshold = 0
        try:
            return super().execute(query, params, prepare=self._prepare, binary=binary)
        finally:
            conn.prepare_threshold = saved


class NewJob(NamedTuple):
    """One job for enqueue_many (fields as for enqueue; None means the task's default)."""

    task: str
    payload: dict[str, Any] | None = None
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    dedupe_key: str | None = None
    max_attempts: int | None = None


class JobManager(models.Manager["Job"]):
    # -- plumbing -------------------------------------------------------------------------------------
    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[jobq_settings().database]

    def _sql(self) -> ModuleType:
        return statements_for(self.connection)

    def _cursor(self) -> CursorWrapper:
        """A _QueueCursor wrapped like Django's own: errors become django.db errors, queries are logged
        in DEBUG, execute wrappers apply."""
        connection = self.connection
        connection.ensure_connection()
        with connection.wrap_database_errors:
            raw = _QueueCursor(connection.connection, prepare=jobq_settings().prepared_statements)
        if connection.queries_logged:
            return connection.make_debug_cursor(raw)  # type: ignore[arg-type]
        return connection.make_cursor(raw)  # type: ignore[arg-type]

    def _execute(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        params["now"] = timezone.now() if jobq_settings().clock == "python" else None
        with self._cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def _jobs(self, sql: str, params: dict[str, Any]) -> list[Job]:
        """Run a statement that RETURNs whole job rows and build model instances from them."""
        params["now"] = timezone.now() if jobq_settings().clock == "python" else None
        with self._cursor() as cursor:
            cursor.execute(sql, params)
            names = [column.name for column in cursor.description]
            return self._build(names, cursor.fetchall())

    def _build(self, names: list[str], rows: Iterable[Sequence[Any]]) -> list[Job]:
        connection = self.connection
        fields = [self.model._meta.get_field(name) for name in names]
        converters = [(i, f.from_db_value) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]
        attnames = [f.attname for f in fields]  # type: ignore[union-attr]
        jobs = []
        for row in rows:
            values = list(row)
            for i, convert in converters:
                values[i] = convert(values[i], None, connection)
            jobs.append(self.model.from_db(connection.alias, attnames, values))
        return jobs

    def _lease(self, lease_seconds: float | None) -> float:
        lease = jobq_settings().lease_seconds if lease_seconds is None else lease_seconds
        if validation.seconds(lease, "lease_seconds") == 0:
            raise InvalidJob("lease_seconds must be positive")
        return lease

    def _options(
        self, task: str, queue: str | None, priority: int | None, max_attempts: int | None
    ) -> tuple[str, str, int, int]:
        """(task, queue, priority, max_attempts), checked, with the registered task's defaults."""
        validation.name(task, "task")
        registered = find_task(task)
        if registered is None and jobq_settings().strict_tasks:
            get_task(task)  # raises UnknownTask with the name in the message
        if queue is None:
            queue = registered.queue if registered else "default"
        if priority is None:
            priority = registered.priority if registered else 100
        if max_attempts is None:
            max_attempts = (registered and registered.max_attempts) or jobq_settings().max_attempts
        return (
            task,
            validation.name(queue, "queue"),
            validation.priority(priority),
            validation.max_attempts(max_attempts),
        )

    # -- producing -------------------------------------------------------------------------------------
    def enqueue(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        delay: float | dt.timedelta | None = None,
        dedupe_key: str | None = None,
        max_attempts: int | None = None,
    ) -> int | None:
        """Insert a job in the caller's transaction; its id, or None when an active duplicate exists.

        queue/priority/max_attempts default to the registered task's, then "default"/100/JOBQ["MAX_ATTEMPTS"].
        """
        conf = jobq_settings()
        task, queue, priority, max_attempts = self._options(task, queue, priority, max_attempts)
        params: dict[str, Any] = {
            "task": task, "queue": queue, "priority": priority, "max_attempts": max_attempts,
            "payload": validation.payload_json(payload, conf.max_payload_bytes),
        }  # fmt: skip
        params["run_at"] = None if run_at is None else validation.aware(run_at, "run_at")
        params["delay"] = 0.0 if delay is None else validation.seconds(delay, "delay")
        params["dedupe_key"] = validation.dedupe_key(dedupe_key)
        params["notify"], params["channel"] = conf.notify, conf.notify_channel
        rows = self._execute(self._sql().ENQUEUE, params)
        return rows[0][0] if rows else None

    def enqueue_many(self, jobs: Iterable[NewJob]) -> list[int]:
        """Insert many jobs in one statement; the ids of those inserted (duplicates are skipped).
        Nothing is written if any job is invalid."""
        conf = jobq_settings()
        options: dict[tuple[Any, ...], tuple[str, str, int, int]] = {}  # most jobs share their options
        rows = []
        for job in jobs:
            key = (job.task, job.queue, job.priority, job.max_attempts)
            if key not in options:
                options[key] = self._options(*key)
            rows.append((
                *options[key],
                validation.payload_json(job.payload, conf.max_payload_bytes),
                None if job.run_at is None else validation.aware(job.run_at, "run_at"),
                validation.dedupe_key(job.dedupe_key),
            ))  # fmt: skip
        if not rows:
            return []
        names = ("tasks", "queues", "priorities", "max_attempts", "payloads", "run_ats", "dedupe_keys")
        params: dict[str, Any] = dict(
            zip(names, (list(column) for column in zip(*rows, strict=True)), strict=True)
        )
        params.update(notify=conf.notify, channel=conf.notify_channel)
        return [row[0] for row in self._execute(self._sql().ENQUEUE_MANY, params)]

    # -- consuming -------------------------------------------------------------------------------------
    def claim(
        self, worker_id: str, *, queues: Sequence[str] | None = None, lease_seconds: float | None = None
    ) -> Job | None:
        """Take the next due job (lowest priority value, then run_at, then id) or None."""
        jobs = self.claim_batch(worker_id, 1, queues=queues, lease_seconds=lease_seconds)
        return jobs[0] if jobs else None

    def claim_batch(
        self,
        worker_id: str,
        limit: int,
        *,
        queues: Sequence[str] | None = None,
        lease_seconds: float | None = None,
    ) -> list[Job]:
        """Take up to ``limit`` due jobs in one statement; each comes back RUNNING with attempts + 1."""
        sql = self._sql()
        params: dict[str, Any] = {
            "worker_id": validation.name(worker_id, "worker_id"),
            "limit": validation.integer(limit, "limit", 1, 100_000),
            "lease": self._lease(lease_seconds),
        }
        if queues is None:
            statement = sql.CLAIM_ANY_QUEUE
        else:
            if isinstance(queues, str) or not queues:
                raise InvalidJob("queues must be a non-empty list of queue names (or None for all)")
            names = list(dict.fromkeys(validation.name(q, "queue") for q in queues))
            statement, params["queue"], params["queues"] = (
                (sql.CLAIM_ONE_QUEUE, names[0], None) if len(names) == 1 else (sql.CLAIM_QUEUES, None, names)
            )
        return self._jobs(statement, params)

    def complete(
        self, job_id: int, worker_id: str, result: Any = None, *, attempt: int | None = None
    ) -> bool:
        """RUNNING -> DONE; False when ``worker_id`` (at ``attempt``) no longer owns the job."""
        params = {
            "id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
            "result": validation.dump_json(result, what="result"),
        }
        return bool(self._execute(self._sql().COMPLETE, params))

    def complete_many(self, worker_id: str, done: Sequence[tuple[int, int, str]]) -> set[int]:
        """Complete (id, attempt, result JSON text) triples in one statement; the ids that were still owned."""
        if not done:
            return set()
        ids, attempts, results = (list(column) for column in zip(*done, strict=True))
        params = {"worker_id": worker_id, "ids": ids, "attempts": attempts, "results": results}
        return {row[0] for row in self._execute(self._sql().COMPLETE_MANY, params)}

    def complete_and_claim(
        self,
        worker_id: str,
        done: Sequence[tuple[int, int, str]],
        limit: int,
        queue: str,
        lease_seconds: float | None = None,
    ) -> tuple[set[int], list[Job]]:
        """complete_many and claim_batch for one queue in a single statement (one commit).

        Returns the ids completed (still owned) and the jobs claimed (``limit`` may be 0)."""
        ids, attempts, results = (list(c) for c in zip(*done, strict=True)) if done else ([], [], [])
        params: dict[str, Any] = {
            "worker_id": worker_id, "ids": ids, "attempts": attempts, "results": results,
            "limit": validation.integer(limit, "limit", 0, 100_000), "queue": queue,
            "lease": self._lease(lease_seconds),
            "now": timezone.now() if jobq_settings().clock == "python" else None,
        }  # fmt: skip
        with self._cursor() as cursor:
            cursor.execute(self._sql().COMPLETE_AND_CLAIM, params)
            names = [column.name for column in cursor.description][1:]
            rows = cursor.fetchall()
        completed = set(rows[0][0])
        return completed, self._build(names, (row[1:] for row in rows if row[1] is not None))

    def fail(
        self,
        job_id: int,
        worker_id: str,
        error: Any,
        *,
        backoff_seconds: float | None = None,
        permanent: bool = False,
        attempt: int | None = None,
    ) -> JobStatus | None:
        """RUNNING -> PENDING (retry after the backoff) or DEAD; None when not the owner.

        Without ``backoff_seconds`` the delay is full jitter below compute_backoff(attempts).
        """
        from .models import JobStatus

        conf = jobq_settings()
        params = {
            "id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
            "permanent": bool(permanent),
            "error": validation.error_text(error),
            "base": conf.backoff_base,
            "cap": conf.backoff_cap,
            "backoff": None
            if backoff_seconds is None
            else validation.seconds(backoff_seconds, "backoff_seconds"),
        }
        rows = self._execute(self._sql().FAIL, params)
        return JobStatus(rows[0][0]) if rows else None

    def renew_lease(
        self, job_id: int, worker_id: str, lease_seconds: float | None = None, *, attempt: int | None = None
    ) -> bool:
        """Extend the lease of an owned RUNNING job; False when not the owner."""
        params = {
            "id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
            "lease": self._lease(lease_seconds),
        }
        return bool(self._execute(self._sql().RENEW_LEASE, params))

    def heartbeat(
        self, worker_id: str, running: Sequence[tuple[int, int]], lease_seconds: float | None = None
    ) -> set[int]:
        """Renew the leases of all (id, attempt) a worker runs, in one statement; the ids still owned."""
        if not running:
            return set()
        ids, attempts = (list(column) for column in zip(*running, strict=True))
        params = {
            "worker_id": worker_id,
            "ids": ids,
            "attempts": attempts,
            "lease": self._lease(lease_seconds),
        }
        return {row[0] for row in self._execute(self._sql().HEARTBEAT, params)}

    def release(self, worker_id: str, running: Sequence[tuple[int, int]]) -> list[int]:
        """Give owned (id, attempt) jobs back as PENDING at once (graceful shutdown); the ids released."""
        if not running:
            return []
        ids, attempts = (list(column) for column in zip(*running, strict=True))
        params = {"worker_id": worker_id, "ids": ids, "attempts": attempts}
        return [row[0] for row in self._execute(self._sql().RELEASE, params)]

    def retry_in_slot(
        self, job_id: int, worker_id: str, attempt: int, error: Any, lease_seconds: float | None = None
    ) -> int | None:
        """Record a failed attempt and begin the next one without releasing the job; the new attempt number,
        or None when not the owner or no attempts remain."""
        params = {
            "id": job_id, "worker_id": worker_id, "attempt": attempt,
            "error": validation.error_text(error), "lease": self._lease(lease_seconds),
        }  # fmt: skip
        rows = self._execute(self._sql().RETRY_IN_SLOT, params)
        return int(rows[0][0]) if rows else None

    def release_orphans(self, worker_id: str, queue: str, known: Sequence[int]) -> list[int]:
        """Give back jobs of ``queue`` held by ``worker_id`` other than ``known`` (lost claim replies)."""
        params = {"worker_id": worker_id, "queue": queue, "known": list(known)}
        return [row[0] for row in self._execute(self._sql().RELEASE_ORPHANS, params)]

    def state(self, job_id: int) -> tuple[JobStatus, str | None, int] | None:
        """(status, worker_id, attempts) of a job, or None if it no longer exists."""
        from .models import JobStatus

        rows = self._execute(self._sql().JOB_STATE, {"id": job_id})
        return (JobStatus(rows[0][0]), rows[0][1], rows[0][2]) if rows else None

    def set_progress(
        self, job_id: int, worker_id: str, attempt: int, done: float, total: float | None
    ) -> bool:
        """Record progress of an owned RUNNING job (shown by the admin)."""
        params = {
            "id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
            "progress": validation.dump_json({"done": done, "total": total}, what="progress"),
        }
        return bool(self._execute(self._sql().SET_PROGRESS, params))

    def worker_beat(
        self, worker_id: str, *, hostname: str, pid: int, lanes: dict[str, int], running: int, stopped: bool
    ) -> None:
        """Record that a worker is alive (or has stopped) in jobq_worker."""
        params = {
            "worker_id": worker_id, "hostname": hostname, "pid": pid, "lanes": validation.dump_json(lanes),
            "running": running, "stopped": stopped,
        }  # fmt: skip
        self._execute(self._sql().WORKER_BEAT, params)

    # -- maintenance -----------------------------------------------------------------------------------
    def reap(self) -> list[int]:
        """Every RUNNING job whose lease expired goes to PENDING (or DEAD when exhausted); their ids."""
        return [row[0] for row in self._execute(self._sql().REAP, {})]

    def requeue(self, job_id: int, *, run_at: dt.datetime | None = None, priority: int | None = None) -> bool:
        """DEAD -> PENDING with attempts reset (error history kept); False if not DEAD or blocked by dedupe."""
        return bool(self.requeue_many([job_id], run_at=run_at, priority=priority))

    def requeue_many(
        self, job_ids: Sequence[int], *, run_at: dt.datetime | None = None, priority: int | None = None
    ) -> list[int]:
        """requeue for many jobs in one statement; the ids requeued."""
        params = {
            "ids": list(job_ids),
            "run_at": None if run_at is None else validation.aware(run_at, "run_at"),
            "priority": None if priority is None else validation.priority(priority),
        }
        try:
            with transaction.atomic(using=self.connection.alias):
                return [row[0] for row in self._execute(self._sql().REQUEUE, params)]
        except IntegrityError:
            return []  # a concurrent enqueue took the dedupe key between the check and the update

    def prune(self, status: JobStatus, older_than: float, batch: int) -> int:
        """Delete up to ``batch`` DONE or DEAD jobs finished more than ``older_than`` seconds ago."""
        from .models import JobStatus

        if status not in (JobStatus.DONE, JobStatus.DEAD):
            raise InvalidJob("only DONE and DEAD jobs can be pruned")
        params: dict[str, Any] = {
            "status": int(status),
            "age": validation.seconds(older_than, "older_than"),
            "batch": batch,
        }
        params["now"] = timezone.now() if jobq_settings().clock == "python" else None
        with self.connection.cursor() as cursor:
            cursor.execute(self._sql().PRUNE, params)
            return int(cursor.rowcount)

    def prune_workers(self, older_than: float) -> int:
        """Forget workers not seen for ``older_than`` seconds."""
        params: dict[str, Any] = {"age": older_than}
        params["now"] = timezone.now() if jobq_settings().clock == "python" else None
        with self.connection.cursor() as cursor:
            cursor.execute(self._sql().PRUNE_WORKERS, params)
            return int(cursor.rowcount)

    def counts(self, queue: str | None = None) -> dict[str, int]:
        """Jobs per status name (every status present, zero-filled), optionally for one queue."""
        from .models import JobStatus

        sql = self._sql()
        if queue is None:
            found = dict(self._execute(sql.COUNTS, {}))
        else:
            found = dict(self._execute(sql.COUNTS_QUEUE, {"queue": queue}))
        return {status.name: found.get(status.value, 0) for status in JobStatus}

    # -- async twins -----------------------------------------------------------------------------------
    async def aenqueue(self, *args: Any, **kwargs: Any) -> int | None:
        return await sync_to_async(self.enqueue)(*args, **kwargs)

    async def aclaim(self, *args: Any, **kwargs: Any) -> Job | None:
        return await sync_to_async(self.claim)(*args, **kwargs)

    async def aclaim_batch(self, *args: Any, **kwargs: Any) -> list[Job]:
        return await sync_to_async(self.claim_batch)(*args, **kwargs)

    async def acomplete(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.complete)(*args, **kwargs)

    async def afail(self, *args: Any, **kwargs: Any) -> JobStatus | None:
        return await sync_to_async(self.fail)(*args, **kwargs)

    async def arenew_lease(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.renew_lease)(*args, **kwargs)

    async def areap(self) -> list[int]:
        return await sync_to_async(self.reap)()

    async def arequeue(self, *args: Any, **kwargs: Any) -> bool:
        return await sync_to_async(self.requeue)(*args, **kwargs)

    async def acounts(self, queue: str | None = None) -> dict[str, int]:
        return await sync_to_async(self.counts)(queue)
