"""Producing many jobs at once: enqueue_many, one statement per batch (binary COPY for a large one
without keys), every job checked before anything is written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from django.db import DatabaseError, transaction

from .. import fairness, tracing, validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob, JobqError, PartlyWritten
from ..shards import database_for, on_shard, refuse_foreign_transaction, shard_key, working_database
from ..sql.engine import NewRow
from .base import retrying_conflicts
from .producing import NewJob, ProducerManager


class BulkProducerManager(ProducerManager):
    def enqueue_many(self, jobs: Iterable[NewJob], *, on_duplicate: str = "skip") -> list[int]:
        """Insert many jobs in one statement; the ids of those inserted (and, with on_duplicate
        "replace", of the PENDING holders replaced). Keys and modes as for enqueue; of jobs repeating
        a key inside the batch the first wins. All or nothing: an invalid job raises (its message names
        its index) and nothing is written."""
        if on_duplicate not in ("skip", "replace"):
            raise InvalidJob(
                f"enqueue_many's on_duplicate must be 'skip' or 'replace', not {on_duplicate!r:.100}"
            )
        jobs = list(jobs)
        if not jobq_settings().shards:
            return self._enqueue_many(jobs, on_duplicate)
        placed = self._placed(jobs)
        if len(placed) == 1:
            ((alias, batch),) = placed.items()
            with on_shard(alias, writes_jobs=True):
                return self._enqueue_many(batch, on_duplicate)
        return self._enqueue_spread(placed, jobs, on_duplicate)

    def _placed(self, jobs: list[NewJob]) -> dict[str, list[NewJob]]:
        """``jobs`` by the database each goes to (django_jobq.shards.database_for), in order; the jobs
        of one queue without a shard key all go to one database (one statement, all or nothing)."""
        placed: dict[str, list[NewJob]] = {}
        keyless: dict[str, str] = {}  # queue -> the database of its jobs without a shard key
        for index, job in enumerate(jobs):
            if not isinstance(job, NewJob):  # refused with its index by _rows
                placed.setdefault(working_database(), []).append(job)
                continue
            try:
                queue = self._options(job.task, job.queue, job.priority, job.max_attempts)[1]
                key = validation.dedupe_key(job.dedupe_key)
                concurrency_key = validation.concurrency_key(job.concurrency_key)
                if shard_key(key, concurrency_key, validation.shard_key(job.shard_key)) is None:
                    alias = keyless.get(queue) or keyless.setdefault(queue, database_for(queue))
                else:
                    alias = self._placement(job.task, queue, key, concurrency_key, job.shard_key)
            except InvalidJob as exc:
                raise type(exc)(f"job {index}: {exc}") from None
            placed.setdefault(alias, []).append(job)
        return placed

    def _enqueue_spread(
        self, placed: dict[str, list[NewJob]], jobs: list[NewJob], on_duplicate: str
    ) -> list[int]:
        """Jobs that go to several databases: each database's in one statement, committed on its own.
        Everything is checked first, so an invalid job writes nothing; a database that fails once
        others committed raises PartlyWritten with the ids written."""
        for _ in self._rows(jobs, set()):
            pass  # every job checked before any database is written
        for alias in placed:
            refuse_foreign_transaction(alias)  # a transaction open anywhere: they could not commit with it
        written: list[int] = []
        for alias, batch in placed.items():
            try:
                with on_shard(alias, writes_jobs=True):
                    written += self._enqueue_many(batch, on_duplicate)
            except (JobqError, DatabaseError) as exc:
                if not written:
                    raise
                raise PartlyWritten(
                    f"database {alias!r} refused its {len(batch)} job(s) ({exc}); {len(written)} job(s) "
                    "on other databases were written and committed",
                    ids=written,
                ) from exc
        return written

    def _enqueue_many(self, jobs: list[NewJob], on_duplicate: str) -> list[int]:
        conf = jobq_settings()
        engine = self._engine()
        if (
            engine.bulk_min_rows is not None
            and len(jobs) >= engine.bulk_min_rows
            and not conf.depth_limits()
            and all(getattr(job, "dedupe_key", None) is None for job in jobs)
        ):  # checked while they are sent (a bad one aborts the COPY): no list of rows to build first
            queues: set[str] = set()
            params = self._common({"notify": conf.notify, "channel": conf.notify_channel})
            ids = engine.copy_unkeyed(self.connection, len(jobs), self._rows(jobs, queues), queues, params)
            self._wake(sorted(queues))
            return ids
        rows: list[NewRow] = []
        keys: set[str] = set()
        for row in self._rows(jobs, set()):
            if row.dedupe_key is not None:
                if row.dedupe_key in keys:
                    continue  # the first job with this key wins
                keys.add(row.dedupe_key)
            rows.append(row)
        if not rows:
            return []
        wanted = Counter(row.queue for row in rows)
        if not set(wanted) & set(conf.depth_limits()):
            return self._insert_many(rows, keys, on_duplicate)
        # One transaction: the depth locks the room check takes (sql/postgres/depth.py) cover the insert.
        with transaction.atomic(using=self.connection.alias):
            self._check_room(wanted)
            return self._insert_many(rows, keys, on_duplicate)

    def _insert_many(self, rows: list[NewRow], keys: set[str], on_duplicate: str) -> list[int]:
        conf = jobq_settings()
        names = (
            "tasks", "queues", "priorities", "max_attempts", "payloads", "run_ats", "dedupe_keys",
            "dedupe_dones", "dedupe_deads", "concurrency_keys", "tags", "trace_contexts", "fairness_keys",
        )  # fmt: skip
        params: dict[str, Any] = dict(
            zip(names, (list(column) for column in zip(*rows, strict=True)), strict=True)
        )
        params.update(notify=conf.notify, channel=conf.notify_channel, keys=sorted(keys))
        sql = self._sql()
        if not keys:
            statement = sql.ENQUEUE_MANY
        else:
            statement = sql.ENQUEUE_MANY_KEYED if on_duplicate == "skip" else sql.ENQUEUE_MANY_REPLACE

        def run() -> list[int]:
            return [row[0] for row in self._execute(statement, params)]

        # plain inserts take no row lock, nothing to deadlock with; keyed ones are retried
        ids = run() if not keys else retrying_conflicts(self.connection.alias, run)
        if ids:
            self._wake(sorted(set(params["queues"])))
        return ids

    def _rows(self, jobs: list[NewJob], queues: set[str]) -> Iterator[NewRow]:
        """Each job checked, with the registered task's defaults, as it will be written; its queue
        added to ``queues``. InvalidJob names the job's index."""
        options: dict[tuple[Any, ...], tuple[str, str, int, int]] = {}  # most jobs share their options
        trace_context = tracing.carrier()  # the batch's enqueue: one context for all its jobs
        fair = jobq_settings().fair_queues()
        for index, job in enumerate(jobs):
            try:
                if not isinstance(job, NewJob):
                    raise InvalidJob(f"expected a NewJob, not {type(job).__name__}")
                options_key = (job.task, job.queue, job.priority, job.max_attempts)
                if (checked := options.get(options_key)) is None:
                    checked = options[options_key] = self._options(*options_key)
                    queues.add(checked[1])
                task, queue, priority, max_attempts = checked
                payload = self._payload(task, job.payload)
                run_at = None if job.run_at is None else validation.aware(job.run_at, "run_at")
                key = None if job.dedupe_key is None else validation.dedupe_key(job.dedupe_key)
                done, dead = (
                    (None, None)
                    if key is None
                    else self._windows(task, key, job.dedupe_done, job.dedupe_dead)
                )
                concurrency_key = (
                    None if job.concurrency_key is None else validation.concurrency_key(job.concurrency_key)
                )
                tags = None if job.tags is None else validation.tags_json(job.tags)
                fairness_key = fairness.key_for(queue, validation.fairness_key(job.fairness_key), fair)
            except InvalidJob as exc:
                raise type(exc)(f"job {index}: {exc}") from None
            yield NewRow(
                task,
                queue,
                priority,
                max_attempts,
                payload,
                run_at,
                key,
                done,
                dead,
                concurrency_key,
                tags,
                trace_context,
                fairness_key,
            )
