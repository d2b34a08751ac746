"""Producing many jobs at once: enqueue_many, one statement per batch (binary COPY for a large one
without keys), every job checked before anything is written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from django.db import DatabaseError, connections, transaction

from .. import fairness, tracing, validation
from ..conf import jobq_settings
from ..exceptions import ForeignTransaction, InvalidJob, JobqError, PartlyWritten, SpansDatabases
from ..shards import choose, on_shard, outbox_source, placement_key, shared_databases, working_database
from ..sql.engine import NewRow
from .base import retrying_conflicts
from .producing import NewJob, ProducerManager


class BulkProducerManager(ProducerManager):
    def enqueue_many(self, jobs: Iterable[NewJob], *, on_duplicate: str = "skip") -> list[int]:
        """Insert many jobs in one statement; the ids of those inserted (and, with on_duplicate
        "replace", of the PENDING holders replaced). Keys and modes as for enqueue; of jobs repeating
        a key inside the batch the first wins. An invalid job raises (its message names its index)
        and nothing is written. All or nothing on one database; jobs for several (JOBQ["SHARDS"]) are
        written per database, their ids grouped by database (PartlyWritten: docs/operations/shards.md)."""
        if on_duplicate not in ("skip", "replace"):
            raise InvalidJob(
                f"enqueue_many's on_duplicate must be 'skip' or 'replace', not {on_duplicate!r:.100}"
            )
        jobs = list(jobs)
        if not jobq_settings().shards:
            return self._enqueue_many(jobs, on_duplicate)
        placed = self._placed(jobs)
        if (source := self._joined_transaction(placed)) is not None:
            return self._enqueue_joined(source, placed, jobs, on_duplicate)
        if len(placed) == 1:
            ((alias, batch),) = placed.items()
            with on_shard(alias, writes_jobs=True):
                return self._enqueue_many(batch, on_duplicate)
        return self._enqueue_spread(placed, jobs, on_duplicate)

    def _placed(self, jobs: list[NewJob]) -> dict[str, list[NewJob]]:
        """``jobs`` by the database each goes to (django_jobq.shards.database_for), in order; the jobs
        of one queue without a shard key all go to one database (one statement, all or nothing)."""
        found: list[tuple[NewJob, str | None]] = []  # each job, and its database if a key places it
        keyless: set[str] = set()  # the queues of the jobs without a shard key
        for index, job in enumerate(jobs):
            if not isinstance(job, NewJob):  # refused with its index by _rows
                found.append((job, working_database()))
                continue
            try:
                queue = self._options(job.task, job.queue, job.priority, job.max_attempts)[1]
                key = validation.dedupe_key(job.dedupe_key)
                concurrency_key = validation.concurrency_key(job.concurrency_key)
                if placement_key(key, concurrency_key, validation.shard_key(job.shard_key)) is None:
                    keyless.add(queue)
                    found.append((job, None))
                else:
                    found.append((job, self._placement(job.task, queue, key, concurrency_key, job.shard_key)))
            except InvalidJob as exc:
                raise type(exc)(f"job {index}: {exc}") from None
        together = self._keyless_database(keyless)
        placed: dict[str, list[NewJob]] = {}
        for job, alias in found:
            placed.setdefault(alias or together(job), []).append(job)
        return placed

    def _keyless_database(self, queues: set[str]) -> Any:
        """job -> the database of a job without a shard key: one that every queue of ``queues``
        shares, when there is one (the batch's key-less jobs then go in one statement), else one per
        queue; chosen as database_for does."""
        try:
            shared = choose(shared_databases(queues), None)
            return lambda job: shared
        except SpansDatabases:
            each = {queue: choose(shared_databases([queue]), None) for queue in queues}
            return lambda job: each[self._options(job.task, job.queue, job.priority, job.max_attempts)[1]]

    @staticmethod
    def _joined_transaction(placed: dict[str, list[NewJob]]) -> str | None:
        """The database whose open transaction the batch joins through its outbox (some of its jobs
        go to other databases: django_jobq.shards.outbox_source), or None."""
        for alias in placed:
            if (source := outbox_source(alias)) is not None:
                return source
        return None

    def _enqueue_joined(
        self, source: str, placed: dict[str, list[NewJob]], jobs: list[NewJob], on_duplicate: str
    ) -> list[int]:
        """A batch inside a transaction on ``source``: its jobs for ``source`` in one statement there,
        the others through its outbox (managers/outbox.py), all in that transaction: they commit or
        roll back with it. Everything is checked first; a job the outbox cannot carry (a dedupe key,
        a queue with a MAX_DEPTH: decided on its database at once) is ForeignTransaction, nothing
        written. Ids grouped by database, ``source``'s first."""
        for _ in self._rows(jobs, set()):
            pass  # every job checked before anything is written
        limits = jobq_settings().depth_limits()
        carried: list[tuple[str, dict[str, Any]]] = []
        for alias, batch in placed.items():
            if alias == source:
                continue
            for row in self._rows(batch, set()):
                if row.dedupe_key is not None or row.queue in limits:
                    raise ForeignTransaction(
                        f"queue {row.queue!r} is on database {alias!r}, and this enqueue_many runs inside "
                        f"a transaction on {source!r}: a job with a dedupe key, or of a queue with a "
                        "MAX_DEPTH, is decided on its database at once, which the outbox cannot do; "
                        "nothing was written (docs/operations/shards.md)"
                    )
                carried.append((alias, _outbox_job(row)))
        written: list[int] = []
        with transaction.atomic(using=source):  # a savepoint: a database that fails undoes it all
            if source in placed:
                with on_shard(source, writes_jobs=True):
                    written += self._enqueue_many(placed[source], on_duplicate)
            return written + self._to_outbox(source, carried)

    def _enqueue_spread(
        self, placed: dict[str, list[NewJob]], jobs: list[NewJob], on_duplicate: str
    ) -> list[int]:
        """Jobs that go to several databases: each database's in one statement, committed on its own.
        Everything is checked first, so an invalid job writes nothing; a database that fails once
        others committed raises PartlyWritten with the ids written."""
        for _ in self._rows(jobs, set()):
            pass  # every job checked before any database is written
        if open_on := [c.alias for c in connections.all(initialized_only=True) if c.in_atomic_block]:
            raise ForeignTransaction(
                f"these jobs go to databases {', '.join(placed)}, and a transaction is open on "
                f"{', '.join(open_on)}: they could not commit or roll back with it together. Enqueue "
                "them after the commit, or each database's inside its own transaction"
            )
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


def _outbox_job(row: NewRow) -> dict[str, Any]:
    """A checked job as its outbox entry's columns (managers/outbox.py, as _through_outbox writes them)."""
    return {
        "task": row.task, "queue": row.queue, "payload": row.payload, "priority": row.priority,
        "run_at": None if row.run_at is None else row.run_at.isoformat(), "max_attempts": row.max_attempts,
        "concurrency_key": row.concurrency_key, "tags": row.tags, "trace_context": row.trace_context,
        "fairness_key": row.fairness_key,
    }  # fmt: skip
