"""Producing jobs: enqueue and enqueue_or_get (enqueue_many: producing_many.py). Every value is checked before anything is
written; the dedupe rule (windows, modes) is decided by the statements (sql/postgres/enqueue.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, NamedTuple

from django.utils import timezone

from .. import fairness, tracing, validation
from ..conf import home_database, jobq_settings
from ..exceptions import DedupeKeyConflict, InvalidJob, QueueFull
from ..registry import find_task, get_task
from ..shards import database_for, databases_of_queue, on_shard, outbox_source, placement_key
from .outbox import OutboxManager


class NewJob(NamedTuple):
    """One job for enqueue_many (fields as for enqueue; None means the task's default)."""

    task: str
    payload: dict[str, Any] | None = None
    queue: str | None = None
    priority: int | None = None
    run_at: dt.datetime | None = None
    dedupe_key: str | None = None
    max_attempts: int | None = None
    dedupe_done: float | dt.timedelta | None = None
    dedupe_dead: float | dt.timedelta | None = None
    concurrency_key: str | None = None
    tags: Sequence[str] | None = None
    fairness_key: str | None = None  # the key a fair queue serves round-robin (JOBQ["QUEUES"][q]["FAIR"])
    depends_on: Sequence[int] | None = None  # existing jobs it waits for (django_jobq.workflows)
    on_dependency_failure: str = "cancel"
    shard_key: str | None = None  # places a job of a spread queue that has no dedupe or concurrency key


class Enqueued(NamedTuple):
    """The row an enqueue wrote (or, replacing, updated): its id and created_at, as stored."""

    id: int
    created_at: dt.datetime


ON_DUPLICATE = ("skip", "replace", "debounce")
DEBOUNCE_TRIES = 3  # a holder claimed after the statement's snapshot is freed on the next try
ENQUEUE_OR_GET_TRIES = 10  # a holder committed after the statement's snapshot is seen on the next try


class ProducerManager(OutboxManager):
    @staticmethod
    def _payload(task: str, payload: Any) -> str:
        """The payload's JSON text, once it is checked to fit the registered task's signature."""
        text = validation.payload_json(payload, jobq_settings().max_payload_bytes)
        if registered := find_task(task):
            registered.check_call(payload or {})
        return text

    def _options(
        self, task: str, queue: str | None, priority: int | None, max_attempts: int | None
    ) -> tuple[str, str, int, int]:
        """(task, queue, priority, max_attempts), checked, with the registered task's defaults."""
        validation.name(task, "task")
        registered = find_task(task)
        if registered is None and jobq_settings().strict_tasks:
            get_task(task)  # raises UnknownTask with the name in the message
        if registered is not None:
            capabilities = self._engine().capabilities
            for feature, what in registered.features():
                capabilities.require(feature, f"task {task!r} ({what})")
        if queue is None:
            queue = registered.queue if registered else "default"
        if registered is not None and registered.atomic and databases_of_queue(queue) != (home_database(),):
            raise InvalidJob(  # its writes are on the application's database, its DONE on the queue's
                f"task {task!r} is atomic: its jobs run in one transaction with their DONE write, "
                f"which queue {queue!r} on another database than {home_database()!r} cannot give"
            )
        if priority is None:
            priority = registered.priority if registered else 100
        if max_attempts is None:
            max_attempts = (registered and registered.max_attempts) or jobq_settings().max_attempts
        return (
            task,
            validation.queue(queue),
            validation.priority(priority),
            validation.max_attempts(max_attempts),
        )

    @staticmethod
    def _windows(task: str, key: str | None, done: Any, dead: Any) -> tuple[float | None, float | None]:
        """How long ``key`` stays taken after DONE and after DEAD, in seconds: the call's, else the
        registered task's, else JOBQ's; (None, None) without a key."""
        if key is None:
            return None, None
        conf, registered = jobq_settings(), find_task(task)
        if done is None:
            done = registered.dedupe_done if registered and registered.dedupe_done is not None else None
        if dead is None:
            dead = registered.dedupe_dead if registered and registered.dedupe_dead is not None else None
        return (
            conf.dedupe_done_seconds if done is None else validation.seconds(done, "dedupe_done"),
            conf.dedupe_dead_seconds if dead is None else validation.seconds(dead, "dedupe_dead"),
        )

    @staticmethod
    def _mode(on_duplicate: Any, key: str | None, delay: float) -> str:
        if on_duplicate not in ON_DUPLICATE:
            raise InvalidJob(
                f"on_duplicate must be one of {', '.join(ON_DUPLICATE)}, not {on_duplicate!r:.100}"
            )
        if on_duplicate != "skip" and key is None:
            raise InvalidJob(f"on_duplicate={on_duplicate!r} needs a dedupe_key")
        if on_duplicate == "debounce" and delay <= 0:
            raise InvalidJob("on_duplicate='debounce' needs a positive delay (the quiet period)")
        return str(on_duplicate)

    def _enqueue_params(
        self,
        task: str,
        payload: dict[str, Any] | None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        delay: float | dt.timedelta | None = None,
        dedupe_key: str | None = None,
        max_attempts: int | None = None,
        dedupe_done: float | dt.timedelta | None = None,
        dedupe_dead: float | dt.timedelta | None = None,
        concurrency_key: str | None = None,
        tags: Sequence[str] | None = None,
        fairness_key: str | None = None,
        shard_key: str | None = None,
    ) -> dict[str, Any]:
        conf = jobq_settings()
        task, queue, priority, max_attempts = self._options(task, queue, priority, max_attempts)
        params: dict[str, Any] = {
            "task": task, "queue": queue, "priority": priority, "max_attempts": max_attempts,
            "payload": self._payload(task, payload),
        }  # fmt: skip
        params["run_at"] = None if run_at is None else validation.aware(run_at, "run_at")
        params["delay"] = 0.0 if delay is None else validation.seconds(delay, "delay")
        params["dedupe_key"] = key = validation.dedupe_key(dedupe_key)
        params["dedupe_done"], params["dedupe_dead"] = self._windows(task, key, dedupe_done, dedupe_dead)
        params["concurrency_key"] = validation.concurrency_key(concurrency_key)
        params["tags"] = validation.tags_json(tags)
        params["fairness_key"] = fairness.key_for(
            queue, validation.fairness_key(fairness_key), conf.fair_queues()
        )
        params["trace_context"] = tracing.carrier()
        params["notify"], params["channel"] = conf.notify, conf.notify_channel
        params["database"] = self._placement(task, queue, key, params["concurrency_key"], shard_key)
        return params

    def _placement(
        self, task: str, queue: str, key: str | None, concurrency_key: str | None, explicit: Any
    ) -> str:
        """The database a job goes to (django_jobq.shards.database_for)."""
        explicit = validation.shard_key(explicit)
        if key is not None:
            self._refuse_split_key(task, queue, concurrency_key)
        return database_for(queue, placement_key(key, concurrency_key, explicit))

    @staticmethod
    def _refuse_split_key(task: str, queue: str, concurrency_key: str | None) -> None:
        """InvalidJob for a job of a spread queue that counts under its task's per-key cap but is
        placed by something else than its concurrency key: its key's jobs would be on several
        databases, and the cap counted on each alone."""
        if concurrency_key is None or len(databases_of_queue(queue)) == 1:
            return
        registered = find_task(task)
        if registered is not None and registered.max_running_per_key is not None:
            raise InvalidJob(
                f"queue {queue!r} is spread over several databases and task {task!r} caps its jobs "
                "per concurrency key: such a job is placed by its concurrency key alone (no dedupe "
                "key, no workflow)"
            )

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
        dedupe_done: float | dt.timedelta | None = None,
        dedupe_dead: float | dt.timedelta | None = None,
        on_duplicate: str = "skip",
        concurrency_key: str | None = None,
        tags: Sequence[str] | None = None,
        fairness_key: str | None = None,
        shard_key: str | None = None,
    ) -> int | None:
        """Insert a job in the caller's transaction; its id, or None when the dedupe key is taken
        (by an active job, or a finished one inside its window) and the mode leaves that job alone.

        queue/priority/max_attempts default to the registered task's, then "default"/100/JOBQ["MAX_ATTEMPTS"];
        dedupe_done/dedupe_dead (seconds or timedelta) to the task's, then JOBQ["DEDUPE_DONE_SECONDS"] /
        ["DEDUPE_DEAD_SECONDS"]. on_duplicate: "skip"; "replace" (a PENDING holder of the same task
        takes this payload, priority and run_at, and its id is returned); "debounce" (a required delay:
        a burst of calls runs once, ``delay`` after the last, with the last payload: a PENDING holder
        of the same task is replaced and pushed back; a RUNNING or finished one, whatever its window,
        hands the key to a new job, the successor, whose id is returned). tags: labels to find the
        job by (cancel_many, the admin); a replaced holder keeps its own. fairness_key: the key a fair
        queue shares its starts between (JOBQ["QUEUES"][q]["FAIR"]; docs/guide/fairness.md).
        shard_key: on a queue spread over several databases, the key that places a job with neither
        dedupe key nor concurrency key (docs/operations/shards.md); ignored elsewhere.
        """
        row = self.enqueue_row(
            task, payload, queue=queue, priority=priority, run_at=run_at, delay=delay, dedupe_key=dedupe_key,
            max_attempts=max_attempts, dedupe_done=dedupe_done, dedupe_dead=dedupe_dead,
            on_duplicate=on_duplicate, concurrency_key=concurrency_key, tags=tags, fairness_key=fairness_key,
            shard_key=shard_key,
        )  # fmt: skip
        return None if row is None else row.id

    def enqueue_row(
        self, task: str, payload: dict[str, Any] | None = None, *, on_duplicate: str = "skip", **options: Any
    ) -> Enqueued | None:
        """enqueue(), answering the written row's id and created_at (the database's clock, from the
        same statement), or None as enqueue() does."""
        params = self._enqueue_params(task, payload, **options)
        mode = self._mode(on_duplicate, params["dedupe_key"], params["delay"])
        database = params["database"]
        if jobq_settings().shards and (source := outbox_source(database)) is not None:
            params["max_depth"] = jobq_settings().depth_limits().get(params["queue"])
            return Enqueued(*self._through_outbox(source, params, mode))
        with on_shard(database, writes_jobs=True):
            return self._enqueue_row(params, mode)

    def _enqueue_row(self, params: dict[str, Any], mode: str) -> Enqueued | None:
        params["max_depth"] = limit = jobq_settings().depth_limits().get(params["queue"])
        statement = self._enqueue_statement(
            mode, keyed=params["dedupe_key"] is not None, gated=limit is not None
        )
        # A debounce that got nothing back met a holder a worker claimed after its snapshot, or one of
        # another task: once more, in a new snapshot, frees the former (sql/postgres/enqueue.py).
        for _ in range(DEBOUNCE_TRIES if mode == "debounce" else 1):
            if limit is None:
                rows = self._execute(statement, params)
                job_id, created_at = (rows[0][0], rows[0][-1]) if rows else (None, None)
            else:
                room, job_id, _, created_at = self._execute(statement, params)[0]
                if not room:
                    raise self._full(params["queue"], limit)
            if job_id is not None:
                if self._due(params):
                    self._wake([params["queue"]])
                return Enqueued(int(job_id), self._moment(created_at))
        return None

    def _enqueue_statement(self, mode: str, *, keyed: bool, gated: bool) -> Any:
        sql = self._sql()
        if not keyed:
            return sql.ENQUEUE_GATED if gated else sql.ENQUEUE
        name = {"skip": "ENQUEUE_KEYED", "replace": "ENQUEUE_REPLACE", "debounce": "ENQUEUE_DEBOUNCE"}[mode]
        return getattr(sql, f"{name}_GATED" if gated else name)

    @staticmethod
    def _due(params: dict[str, Any]) -> bool:
        """The job enqueue wrote (inserted or replaced) is due now: worth waking a worker for."""
        run_at = params["run_at"]
        return params["delay"] == 0 and (run_at is None or run_at <= timezone.now())

    @staticmethod
    def _full(queue: str, limit: int) -> QueueFull:
        return QueueFull(
            f"queue {queue!r} is full: it holds its MAX_DEPTH of {limit} PENDING or RUNNING jobs"
        )

    def _check_room(self, wanted: dict[str, int]) -> None:
        """QueueFull (writing nothing) unless ``wanted[queue]`` more jobs fit in each queue with a MAX_DEPTH."""
        limits = jobq_settings().depth_limits()
        limited = {queue: n for queue, n in wanted.items() if queue in limits}
        if not limited:
            return
        params = {
            "queues": list(limited),
            "counts": list(limited.values()),
            "limits": [limits[q] for q in limited],
        }
        if full := sorted(row[0] for row in self._execute(self._sql().DEPTH_FULL, params)):
            raise (
                self._full(full[0], limits[full[0]])
                if len(full) == 1
                else QueueFull(
                    f"queues {', '.join(map(repr, full))} are full (MAX_DEPTH); nothing was written"
                )
            )

    def enqueue_or_get(
        self,
        task: str,
        payload: dict[str, Any] | None = None,
        *,
        dedupe_key: str,
        queue: str | None = None,
        priority: int | None = None,
        run_at: dt.datetime | None = None,
        delay: float | dt.timedelta | None = None,
        max_attempts: int | None = None,
        dedupe_done: float | dt.timedelta | None = None,
        dedupe_dead: float | dt.timedelta | None = None,
        concurrency_key: str | None = None,
        tags: Sequence[str] | None = None,
        fairness_key: str | None = None,
        shard_key: str | None = None,
    ) -> tuple[int, bool]:
        """(job id, created): the job holding ``dedupe_key`` (active, or finished inside its window, a
        cache hit), or a new one this call inserted. One statement decides; see enqueue.
        DedupeKeyConflict when the holder is another task's job: its result is not this call's."""
        row, created = self.enqueue_or_get_row(
            task, payload, dedupe_key=dedupe_key, queue=queue, priority=priority, run_at=run_at,
            delay=delay, max_attempts=max_attempts, dedupe_done=dedupe_done, dedupe_dead=dedupe_dead,
            concurrency_key=concurrency_key, tags=tags, fairness_key=fairness_key, shard_key=shard_key,
        )  # fmt: skip
        return row.id, created

    def enqueue_or_get_row(
        self, task: str, payload: dict[str, Any] | None = None, *, dedupe_key: str, **options: Any
    ) -> tuple[Enqueued, bool]:
        """enqueue_or_get(), answering the row's id and created_at (from the same statement)."""
        if dedupe_key is None:
            raise InvalidJob("enqueue_or_get needs a dedupe_key")
        params = self._enqueue_params(task, payload, dedupe_key=dedupe_key, **options)
        with on_shard(params["database"], writes_jobs=True):
            return self._enqueue_or_get_row(params, dedupe_key)

    def _enqueue_or_get_row(self, params: dict[str, Any], dedupe_key: str) -> tuple[Enqueued, bool]:
        params["max_depth"] = jobq_settings().depth_limits().get(params["queue"])
        sql = self._sql()
        statement = sql.ENQUEUE_OR_GET if params["max_depth"] is None else sql.ENQUEUE_OR_GET_GATED
        for _ in range(ENQUEUE_OR_GET_TRIES):
            rows = self._execute(statement, params)
            if rows:
                job_id, created = int(rows[0][0]), bool(rows[0][1])
                row = Enqueued(job_id, self._moment(rows[0][2]))
                if created:
                    self._wake([params["queue"]])
                    return row, True
                if (holder := self._task_of(job_id)) == params["task"]:
                    return row, False
                if holder is not None:
                    raise DedupeKeyConflict(params["dedupe_key"], params["task"], job_id, holder)
                continue  # the holder was deleted since the statement's snapshot: decide again
            self._check_room({params["queue"]: 1})  # no holder and no room: QueueFull
        raise InvalidJob(
            f"dedupe key {dedupe_key!r:.100} kept changing hands, or its holder is not visible from this "
            "transaction (enqueue_or_get needs READ COMMITTED)"
        )

    def _task_of(self, job_id: int) -> str | None:
        """Job ``job_id``'s task, None when there is no such job."""
        rows = self._execute(self._sql().JOB_TASK, {"id": job_id})
        return str(rows[0][0]) if rows else None
