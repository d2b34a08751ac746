"""Plumbing shared by the manager's operations: the engine that runs each statement, parameters, building jobs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from django.db import OperationalError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DEFERRED
from django.db.models.expressions import Col
from django.utils import timezone

from .. import validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob
from ..shards import database_of_job, on_shard
from ..sql import Engine, Result, engine_of

if TYPE_CHECKING:
    from ..models import Job

T = TypeVar("T")
CONFLICT_RETRIES = 5  # runs of a statement that PostgreSQL aborted to break a deadlock, at most
MOVE_HOPS = 16  # moves of one job followed by current_ids, at most


def retrying_conflicts(alias: str, run: Callable[[], T]) -> T:
    """``run()`` in a savepoint (its own transaction outside one), run again when PostgreSQL aborts it
    to break a deadlock or a serialisation conflict: the savepoint undoes its work, so running it
    again is safe. For statements that lock several rows another statement may lock in another order
    (keyed bulk enqueue, bulk requeue)."""
    for attempt in range(CONFLICT_RETRIES):
        try:
            with transaction.atomic(using=alias):
                return run()
        except OperationalError as exc:
            conflict = isinstance(
                exc.__cause__, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure
            )
            if not conflict or attempt == CONFLICT_RETRIES - 1:
                raise
            time.sleep(random.uniform(0, 0.005 * 2**attempt))  # the other side commits meanwhile
    raise AssertionError("unreachable")


_RowPlan = tuple[list[tuple[int, Callable[..., Any], Col]], list[int | None], list[str]]
_ROW_PLANS: dict[tuple[str, str, tuple[str, ...]], _RowPlan] = {}  # BaseJobManager._row_plan's


class BaseJobManager(models.Manager["Job"]):
    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[jobq_settings().database]

    def _engine(self) -> Engine:
        return engine_of(self.connection)

    def _sql(self) -> Any:
        return self._engine().statements

    @staticmethod
    def _common(params: dict[str, Any]) -> dict[str, Any]:
        """Parameters every statement may use: the clock, the error history's length, the completion
        channel."""
        conf = jobq_settings()
        params["now"] = timezone.now() if conf.clock == "python" else None
        params["history"] = conf.error_history
        params["done_channel"] = conf.done_channel
        return params

    def _run(self, sql: Any, params: dict[str, Any]) -> Result:
        """Run one named statement of this connection's engine."""
        connection = self.connection
        return engine_of(connection).run(connection, sql, self._common(params))

    def _execute(self, sql: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return self._run(sql, params).rows

    def _rowcount(self, sql: Any, params: dict[str, Any]) -> int:
        return self._run(sql, params).rowcount

    def _jobs(self, sql: Any, params: dict[str, Any]) -> list[Job]:
        """Run a statement that RETURNs job columns and build model instances from them."""
        result = self._run(sql, params)
        return self._build(result.names, result.rows)

    @staticmethod
    def _notify_params(params: dict[str, Any]) -> dict[str, Any]:
        """The parameters of a statement that may wake workers (sql/postgres/terms.py, wake)."""
        conf = jobq_settings()
        params["notify"], params["channel"] = conf.notify, conf.notify_channel
        return params

    def _wake(self, payloads: Sequence[str]) -> None:
        """Wake this process's workers on commit where the engine has no NOTIFY (JOBQ["NOTIFY"])."""
        if jobq_settings().notify:
            connection = self.connection
            engine_of(connection).wake_local(connection.alias, payloads)

    def _build(self, names: list[str], rows: Iterable[Sequence[Any]]) -> list[Job]:
        """Model instances from rows whose columns are ``names`` (any order, any subset; the others
        are deferred)."""
        rows = list(rows)
        if not rows:
            return []
        connection = self.connection
        converters, order, attnames = self._row_plan(connection, tuple(names))
        jobs = []
        for row in rows:
            values = list(row)
            for i, convert, column in converters:
                values[i] = convert(values[i], column, connection)
            ordered = [DEFERRED if i is None else values[i] for i in order]
            jobs.append(self.model.from_db(connection.alias, attnames, ordered))
        return jobs

    def _moment(self, value: Any) -> Any:
        """A timestamp column's value from a raw row, as the ORM reads it (SQLite returns text)."""
        return self._build(["created_at"], [(value,)])[0].created_at

    def _row_plan(self, connection: BaseDatabaseWrapper, names: tuple[str, ...]) -> _RowPlan:
        """How rows with columns ``names`` become instances: the converters (the backend's, e.g. text
        times on SQLite, and the field's, e.g. JSON, as the ORM applies them), where each concrete
        field's value is, and the fields' attribute names. The same for every row of a statement, so
        worked out once per connection vendor and column list."""
        key = (connection.vendor, connection.alias, names)
        if (plan := _ROW_PLANS.get(key)) is not None:
            return plan
        fields = [self.model._meta.get_field(name) for name in names]
        converters = []
        for i, f in enumerate(fields):
            column = Col(self.model._meta.db_table, f)  # type: ignore[arg-type]
            for convert in connection.ops.get_db_converters(column) + column.get_db_converters(connection):
                converters.append((i, convert, column))
        position = {f.attname: i for i, f in enumerate(fields)}  # type: ignore[union-attr]
        order = [position.get(f.attname) for f in self.model._meta.concrete_fields]
        attnames = [f.attname for f in self.model._meta.concrete_fields]
        plan = _ROW_PLANS[key] = (converters, order, attnames)
        return plan

    @staticmethod
    def _lease(lease_seconds: float | None) -> float:
        lease = jobq_settings().lease_seconds if lease_seconds is None else lease_seconds
        if validation.seconds(lease, "lease_seconds") == 0:
            raise InvalidJob("lease_seconds must be positive")
        return lease

    def bound_statements(self) -> None:
        """Put JOBQ["STATEMENT_TIMEOUT"] and ["LOCK_TIMEOUT"] on this thread's queue connection, once
        per new connection. For the worker's and reaper's own threads only: a task's connection keeps
        the application's settings. Not with JOBQ["POOL_MODE"] = "transaction": a session setting
        would stay on whichever server connection ran it, for the pooler's other clients, and miss
        the ones this session's later transactions get (the pooler's server connections carry the
        bounds instead, see docs/operations/pgbouncer.md)."""
        if jobq_settings().pool_mode == "transaction":
            return
        wrapper = self.connection
        wrapper.ensure_connection()
        raw = wrapper.connection
        if getattr(wrapper, "_jobq_bounded", None) is raw:
            return
        conf = jobq_settings()
        self._engine().set_timeouts(wrapper, conf.statement_timeout, conf.lock_timeout)
        wrapper._jobq_bounded = raw  # type: ignore[attr-defined]

    def replan_if_grown(self) -> bool:
        """For the worker's lanes: this thread's queue connection plans its statements again when the
        job table has grown much since they were planned (the engine's replan_if_grown); whether it
        did. Only where this process prepares statements on its own session: behind a
        transaction-mode pooler the pooler keeps them."""
        conf = jobq_settings()
        if conf.pool_mode == "transaction" or not conf.prepared_statements:
            return False
        return self._engine().replan_if_grown(self.connection)

    def current_ids(self, job_ids: Sequence[int]) -> list[int]:
        """The ids ``job_ids`` have now, in order: with JOBQ["SHARDS"], a job that ``jobq_queue move``
        took off its database is found under the id it was given where it went (followed over later
        moves: at most MOVE_HOPS); any other id as it is. A statement per database the ids name, only
        with SHARDS (nothing is ever moved without); UnknownShard for an id of no configured one."""
        job_ids = [validation.integer(i, "job id", 1, (1 << 63) - 1) for i in job_ids]
        if not jobq_settings().shards or not job_ids:
            return job_ids
        now = {job_id: job_id for job_id in job_ids}
        for _ in range(MOVE_HOPS):
            by_database: dict[str, list[int]] = {}
            for job_id in set(now.values()):
                by_database.setdefault(database_of_job(job_id), []).append(job_id)
            went: dict[int, int] = {}
            for alias, ids in by_database.items():
                with on_shard(alias):
                    went.update(
                        (int(old), int(new)) for old, new in self._execute(self._sql().MOVED_TO, {"ids": ids})
                    )
            if not went:
                break
            now = {asked: went.get(job_id, job_id) for asked, job_id in now.items()}
        return [now[job_id] for job_id in job_ids]

    def current_id(self, job_id: int) -> int:
        """current_ids for one id."""
        return self.current_ids([job_id])[0]

    def worker_is_live(self, worker_id: str, within: float) -> bool:
        """Whether a running worker recorded ``worker_id`` in the last ``within`` seconds."""
        return bool(self._execute(self._sql().WORKER_IS_LIVE, {"worker_id": worker_id, "age": within}))

    @staticmethod
    def _fence(fence: Any) -> int | None:
        return None if fence is None else validation.integer(fence, "fence", 0, (1 << 63) - 1)
