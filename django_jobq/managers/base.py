"""Plumbing shared by the manager's operations: the queue's cursor, parameters, building jobs."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from django.db import OperationalError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import DEFERRED
from django.utils import timezone

from .. import validation
from ..conf import jobq_settings
from ..exceptions import InvalidJob
from ..sql import statements_for

if TYPE_CHECKING:
    from ..models import Job

T = TypeVar("T")
CONFLICT_RETRIES = 5  # runs of a statement that PostgreSQL aborted to break a deadlock, at most


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


class QueueCursor(psycopg.Cursor[Any]):
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


class BaseJobManager(models.Manager["Job"]):
    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[jobq_settings().database]

    def _sql(self) -> Any:
        return statements_for(self.connection)

    def _cursor(self) -> CursorWrapper:
        """A QueueCursor wrapped like Django's own: errors become django.db errors, queries are logged
        in DEBUG, execute wrappers apply."""
        connection = self.connection
        connection.ensure_connection()
        with connection.wrap_database_errors:
            raw = QueueCursor(connection.connection, prepare=bool(jobq_settings().prepared_statements))
        if connection.queries_logged:
            return connection.make_debug_cursor(raw)  # type: ignore[arg-type]
        return connection.make_cursor(raw)  # type: ignore[arg-type]

    @staticmethod
    def _common(params: dict[str, Any]) -> dict[str, Any]:
        """Parameters every statement may use: the clock, the error history's length, the completion
        channel."""
        conf = jobq_settings()
        params["now"] = timezone.now() if conf.clock == "python" else None
        params["history"] = conf.error_history
        params["done_channel"] = conf.done_channel
        return params

    def _execute(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self._cursor() as cursor:
            cursor.execute(sql, self._common(params))
            return cursor.fetchall() if cursor.description else []

    def _rowcount(self, sql: str, params: dict[str, Any]) -> int:
        with self._cursor() as cursor:
            cursor.execute(sql, self._common(params))
            return int(cursor.rowcount)

    def _jobs(self, sql: str, params: dict[str, Any]) -> list[Job]:
        """Run a statement that RETURNs job columns and build model instances from them."""
        with self._cursor() as cursor:
            cursor.execute(sql, self._common(params))
            names = [column.name for column in cursor.description]
            return self._build(names, cursor.fetchall())

    def _build(self, names: list[str], rows: Iterable[Sequence[Any]]) -> list[Job]:
        """Model instances from rows whose columns are ``names`` (any order, any subset; the others
        are deferred)."""
        connection = self.connection
        fields = [self.model._meta.get_field(name) for name in names]
        converters = [(i, f.from_db_value) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]
        position = {f.attname: i for i, f in enumerate(fields)}  # type: ignore[union-attr]
        order = [position.get(f.attname) for f in self.model._meta.concrete_fields]
        attnames = [f.attname for f in self.model._meta.concrete_fields]
        jobs = []
        for row in rows:
            values = list(row)
            for i, convert in converters:
                values[i] = convert(values[i], None, connection)
            ordered = [DEFERRED if i is None else values[i] for i in order]
            jobs.append(self.model.from_db(connection.alias, attnames, ordered))
        return jobs

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
        bounds instead, see README "PgBouncer")."""
        if jobq_settings().pool_mode == "transaction":
            return
        wrapper = self.connection
        wrapper.ensure_connection()
        raw = wrapper.connection
        if getattr(wrapper, "_jobq_bounded", None) is raw:
            return
        conf = jobq_settings()
        params = {
            "statement_ms": f"{int(conf.statement_timeout * 1000)}ms",
            "lock_ms": f"{int(conf.lock_timeout * 1000)}ms",
        }
        with wrapper.wrap_database_errors, raw.cursor() as cursor:
            cursor.execute(self._sql().SET_TIMEOUTS, params)
        wrapper._jobq_bounded = raw  # type: ignore[attr-defined]

    def worker_is_live(self, worker_id: str, within: float) -> bool:
        """Whether a running worker recorded ``worker_id`` in the last ``within`` seconds."""
        return bool(self._execute(self._sql().WORKER_IS_LIVE, {"worker_id": worker_id, "age": within}))

    @staticmethod
    def _fence(fence: Any) -> int | None:
        return None if fence is None else validation.integer(fence, "fence", 0, (1 << 63) - 1)
