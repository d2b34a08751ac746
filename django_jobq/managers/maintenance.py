"""Maintenance: reaping expired leases, requeueing dead letters, pruning, counts, role leases."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db import IntegrityError, transaction

from .. import validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob
from ..shards import database_of_job, databases_of_queue, on_shard
from ..status import FINISHED, JobStatus
from .base import BaseJobManager, retrying_conflicts

# Dead versions of jobq_fair_key's rows at which the reaper vacuums it (vacuum_fair_keys): about 7
# index pages read past by each fair claim's walk.
FAIR_KEYS_VACUUM_AT = 1_000
# The databases whose jobq_fair_key this process found it may not vacuum, and said so.
_WARNED_CANNOT_VACUUM: set[str] = set()
logger = logging.getLogger("django_jobq")


class MaintenanceManager(BaseJobManager):
    def reap(self) -> list[int]:
        """Every RUNNING job whose lease expired goes to PENDING (or DEAD when exhausted); their ids.
        Rows locked by another transaction at that moment are left for the next pass. Workers waiting
        for work on the queues of the jobs back to PENDING are woken, as by an enqueue."""
        rows = self._execute(self._sql().REAP, self._notify_params({}))
        self._wake(sorted({row[2] for row in rows if row[3] == JobStatus.PENDING}))
        return [row[0] for row in rows]

    def autovacuum_on(self) -> bool | None:
        """Whether autovacuum vacuums jobq_job (the server's setting and the table's own); None on an
        engine without autovacuum (SQLite)."""
        value = self._execute(self._sql().AUTOVACUUM, {})[0][0]
        return None if value is None else bool(value)

    def requeue(self, job_id: int, *, run_at: dt.datetime | None = None, priority: int | None = None) -> bool:
        """DEAD or CANCELLED -> PENDING with a fresh attempt budget (error history kept); False if
        neither, or its dedupe key is held by another job (active, or finished inside its window).
        The jobs its failure cancelled through their dependencies wait for it again (WAITING)."""
        return bool(self.requeue_many([job_id], run_at=run_at, priority=priority))

    def requeue_many(
        self,
        job_ids: Sequence[int],
        *,
        run_at: dt.datetime | None = None,
        priority: int | None = None,
        spread: float = 0,
    ) -> list[int]:
        """requeue for many jobs in one statement; the ids requeued. Of several jobs sharing a dedupe
        key only one is requeued (the key's holder, else the newest); the others, and jobs whose key
        another job holds, stay DEAD. ``spread`` seconds: each job's run_at is that of the call plus a
        random share of it. Workers waiting for work on the queues of the jobs due now are woken, as
        by an enqueue (on commit)."""
        ids = [validation.integer(i, "job id", 1, (1 << 63) - 1) for i in job_ids]
        if not jobq_settings().shards:
            return self._requeue_here(ids, run_at, priority, spread)
        asked = dict(zip(self.current_ids(ids), ids, strict=True))  # a moved job's id now -> as asked
        ids = list(asked)
        requeued = []
        for alias in {database_of_job(i): None for i in ids}:  # every id's database known before any write
            with on_shard(alias):
                mine = [i for i in ids if database_of_job(i) == alias]
                requeued += self._requeue_here(mine, run_at, priority, spread)
        return [asked.get(job_id, job_id) for job_id in requeued]

    def _requeue_here(
        self, ids: list[int], run_at: dt.datetime | None, priority: int | None, spread: float
    ) -> list[int]:
        """requeue_many on the database this context works on."""
        params = self._notify_params(
            {
                "ids": ids,
                "run_at": None if run_at is None else validation.aware(run_at, "run_at"),
                "priority": None if priority is None else validation.priority(priority),
                "spread": validation.seconds(spread, "spread"),
            }
        )
        try:
            return self._requeue(params)
        except IntegrityError:  # a concurrent enqueue took a dedupe key: go job by job
            requeued = []
            for job_id in ids:
                with contextlib.suppress(IntegrityError):
                    requeued += self._requeue({**params, "ids": [job_id]})
            return requeued

    def _requeue(self, params: dict[str, Any]) -> list[int]:
        def run() -> list[int]:
            self._execute(self._sql().REQUEUE_FREE_KEYS, params)
            rows = self._execute(self._sql().REQUEUE, params)
            requeued = [row[0] for row in rows]
            if requeued:  # the dependents their failure cancelled wait for them again
                self._execute(self._sql().REVIVE, {"ids": requeued})
            self._wake(sorted({row[1] for row in rows if row[2]}))
            return requeued

        return retrying_conflicts(self.connection.alias, run)

    def prune(self, status: JobStatus, older_than: float, batch: int) -> int:
        """Delete up to ``batch`` DONE, DEAD or CANCELLED jobs finished more than ``older_than`` seconds
        ago."""
        if status not in FINISHED:
            raise InvalidJob("only DONE, DEAD and CANCELLED jobs can be pruned")
        params: dict[str, Any] = {
            "status": int(status),
            "age": validation.seconds(older_than, "older_than"),
            "batch": batch,
        }
        return int(self._execute(self._sql().PRUNE, params)[0][0])

    def refresh_depths(self) -> None:
        """Record, for every queue with a MAX_DEPTH whose depth lock is free, the id sequence read
        under that lock, then the count of its jobs that are or may again be PENDING: the baseline the
        enqueue check bounds the depth from (sql/postgres/depth.py). Call it outside any transaction:
        the lock lasts for the transaction (producers of the queue wait for it). A queue whose lock a
        producer's open transaction holds keeps its previous baseline."""
        queues = sorted(jobq_settings().depth_limits())
        if not queues:
            return
        sql = self._sql()
        locked, seq = self._execute(sql.DEPTH_SEQ, {"queues": queues})[0]
        if locked:  # a later statement: every job of these queues with an id up to seq is visible
            self._execute(sql.DEPTH_REFRESH, {"queues": list(locked), "seq": seq})

    def prune_fair_keys(self, batch: int) -> int:
        """Forget up to ``batch`` fairness keys with no PENDING job (sql/postgres/fairness.py: locked
        first, deleted by a later statement that sees every job committed before the lock)."""
        if not self._engine().capabilities.fair_queues:
            return 0
        sql = self._sql()
        with transaction.atomic(using=self.connection.alias):
            idle = self._execute(sql.FAIR_PRUNE_LOCK, {"limit": batch})
            if not idle:
                return 0
            queues, priorities, keys = (list(column) for column in zip(*idle, strict=True))
            params = {"queues": queues, "priorities": priorities, "keys": keys}
            return self._rowcount(sql.FAIR_PRUNE, params)

    def vacuum_fair_keys(self) -> bool:
        """VACUUM jobq_fair_key once it holds FAIR_KEYS_VACUUM_AT dead row versions (and a tenth of its
        live rows): each claim of a fair queue leaves one per key it moved on, and the claim's walk
        of the keys reads past them until a vacuum (sql/postgres/fairness.py). Whether it ran; never
        inside a transaction, where VACUUM cannot run."""
        if not self._engine().capabilities.fair_queues or not self.connection.get_autocommit():
            return False
        sql = self._sql()
        found = self._execute(sql.FAIR_KEYS_DEAD, {})
        dead, live, may_vacuum = found[0] if found else (0, 0, True)
        if dead < max(FAIR_KEYS_VACUUM_AT, live // 10):
            return False
        if not may_vacuum:
            self._say_once_cannot_vacuum()
            return False
        self._execute(sql.VACUUM_FAIR_KEYS, {})
        return True

    def _say_once_cannot_vacuum(self) -> None:
        """A warning, once per process and database, that this user may not vacuum jobq_fair_key."""
        alias = self.connection.alias
        if alias in _WARNED_CANNOT_VACUUM:
            return
        _WARNED_CANNOT_VACUUM.add(alias)
        logger.warning(
            "database %r: this user may not VACUUM jobq_fair_key (it needs the table's owner's rights); "
            "its dead row versions are left to autovacuum, and fair claims read past them until then",
            alias,
        )

    def prune_workers(self, older_than: float) -> int:
        """Forget workers not seen for ``older_than`` seconds."""
        return self._rowcount(self._sql().PRUNE_WORKERS, {"age": older_than})

    def counts(self, queue: str | None = None) -> dict[str, int]:
        """Jobs per status name (every status present, zero-filled), optionally for one queue."""
        sql = self._sql()
        found: Counter[int] = Counter()
        if queue is None:  # the database this context works on
            found.update(dict(self._execute(sql.COUNTS, {})))
        else:
            for alias in databases_of_queue(validation.queue(queue)):
                with on_shard(alias):
                    found.update(dict(self._execute(sql.COUNTS_QUEUE, {"queue": queue})))
        return {status.name: found.get(status.value, 0) for status in JobStatus}

    def acquire_lease(self, name: str, holder: str, seconds: float) -> bool:
        """Hold the maintenance lease ``name`` for ``seconds`` more (taking it if free or expired)."""
        params = {"name": name, "holder": holder, "seconds": validation.seconds(seconds, "seconds")}
        return bool(self._execute(self._sql().LEASE_ACQUIRE, params))

    def release_lease(self, name: str, holder: str) -> None:
        """Give the maintenance lease ``name`` up at once, if ``holder`` still holds it."""
        self._execute(self._sql().LEASE_RELEASE, {"name": name, "holder": holder})
