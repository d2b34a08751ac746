"""The PostgreSQL engine: statements run on a psycopg cursor with server-side binding, prepared."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from psycopg.pq import Format
from psycopg.types.datetime import TimestamptzLoader
from psycopg.types.json import Jsonb

from ...conf import jobq_settings
from ..engine import Engine, NewRow, Result, Statement
from .bulk import BULK_COPY, BULK_MIN_ROWS, BULK_RESERVE, BULK_TYPES, BULK_WAKE
from .terms import PENDING


class QueueCursor(psycopg.Cursor[Any]):
    """Server-side binding (so large arrays can travel in binary, %(name)b), every statement prepared
    unless JOBQ["PREPARED_STATEMENTS"] is off: the queue's few statements run thousands of times per
    connection, so planning them once matters on the claim path. Django leaves the connection's
    prepare_threshold at None (never prepare); it is lifted for this cursor's statements only, so the
    application's own queries keep Django's behaviour."""

    def __init__(self, connection: psycopg.Connection[Any], *, prepare: bool) -> None:
        super().__init__(connection)
        self._prepare = prepare
        if _utc_times(connection):
            # psycopg's own loader (its C version where installed), not Django's: Django's subclass
            # of the pure-Python one parses each timestamp in Python, four per claimed job. Used only
            # where both give the same value: Django's loader sets UTC on a session in UTC.
            self.adapters.register_loader(TIMESTAMPTZ_OID, TimestamptzLoader)

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


TIMESTAMPTZ_OID = psycopg.postgres.types["timestamptz"].oid


def _utc_times(connection: psycopg.Connection[Any]) -> bool:
    """Django reads this connection's timestamps as aware datetimes in UTC (USE_TZ, no TIME_ZONE on
    the alias), and the session's time zone is UTC: psycopg's loader then returns the same values."""
    django_loader = connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    return (
        getattr(django_loader, "timezone", None) is dt.UTC
        and connection.pgconn.parameter_status(b"TimeZone") == b"UTC"
    )


_NAMES: dict[str, list[str]] = {}  # each statement's result columns, read once
# A connection's prepared statements are planned again once the job table is this many times its size
# when they were planned, and at least REPLAN_MIN_BYTES larger (a plan made for a table of a few pages
# reads it whole; past a megabyte that costs each claim more than planning it again once).
REPLAN_GROWTH = 2
REPLAN_MIN_BYTES = 1 << 20


class PostgresEngine(Engine):
    def cursor(self, wrapper: BaseDatabaseWrapper) -> CursorWrapper:
        """A QueueCursor wrapped like Django's own: errors become django.db errors, queries are logged
        in DEBUG, execute wrappers apply."""
        wrapper.ensure_connection()
        with wrapper.wrap_database_errors:
            raw = QueueCursor(wrapper.connection, prepare=bool(jobq_settings().prepared_statements))
        if wrapper.queries_logged:
            return wrapper.make_debug_cursor(raw)  # type: ignore[arg-type]
        return wrapper.make_cursor(raw)  # type: ignore[arg-type]

    def run(self, wrapper: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]) -> Result:
        assert isinstance(statement, str)
        with self.cursor(wrapper) as cursor:
            cursor.execute(statement, params)  # through Django's wrapper: logging, execute wrappers
            raw: QueueCursor = cursor.cursor  # the result is read from psycopg's cursor directly
            with wrapper.wrap_database_errors:
                result = raw.pgresult
                if result is None or not result.nfields:
                    return Result([], [], int(raw.rowcount))
                if (names := _NAMES.get(statement)) is None:  # a statement's columns never change
                    names = _NAMES[statement] = [column.name for column in raw.description or ()]
                return Result(names, raw.fetchall(), int(raw.rowcount))

    def replan_if_grown(self, wrapper: BaseDatabaseWrapper) -> bool:
        """PostgreSQL keeps a prepared statement's generic plan until the table's statistics change
        (autovacuum's ANALYZE), and a plan made while the table was small scans it: when the table has
        grown REPLAN_GROWTH times (and REPLAN_MIN_BYTES) since this connection's plans were made, drop
        them. A new plan reads the table's current size, ANALYZE or not."""
        wrapper.ensure_connection()
        raw = wrapper.connection
        planned = getattr(wrapper, "_jobq_planned_at", None)
        planned_size = planned[1] if planned is not None and planned[0] is raw else None
        with wrapper.wrap_database_errors:
            size = int(raw.execute(self.statements.TABLE_BYTES).fetchone()[0])
            grown = planned_size is not None and (
                size >= planned_size * REPLAN_GROWTH and size - planned_size >= REPLAN_MIN_BYTES
            )
            if grown:
                self._forget_plans(raw)
            # the size the plans are made at; an emptied table's (TRUNCATE) next plans are for that
            if planned_size is None or grown or size < planned_size:
                wrapper._jobq_planned_at = (raw, size)  # type: ignore[attr-defined]
        return grown

    def _forget_plans(self, raw: psycopg.Connection[Any]) -> None:
        """Drop the session's prepared statements. Django leaves prepare_threshold at None, and psycopg
        then keeps no count of statements: lifted (as QueueCursor.execute does), it sees the command
        succeed and forgets the statements it prepared, which it would otherwise try to run again."""
        saved = raw.prepare_threshold
        raw.prepare_threshold = saved if saved is not None else 0
        try:
            raw.execute(self.statements.FORGET_PLANS, prepare=False)
        finally:
            raw.prepare_threshold = saved

    def set_timeouts(self, wrapper: BaseDatabaseWrapper, statement_s: float, lock_s: float) -> None:
        wrapper.ensure_connection()
        conf = jobq_settings()
        params = {"statement_ms": f"{int(statement_s * 1000)}ms", "lock_ms": f"{int(lock_s * 1000)}ms"}
        channels = {"channel": conf.notify_channel if conf.notify else "", "done_channel": conf.done_channel}
        with wrapper.wrap_database_errors, wrapper.connection.cursor() as cursor:
            cursor.execute(self.statements.SET_TIMEOUTS, params)
            cursor.execute(self.statements.SET_CHANNELS, channels)

    bulk_min_rows = BULK_MIN_ROWS

    def copy_unkeyed(
        self,
        wrapper: BaseDatabaseWrapper,
        count: int,
        rows: Iterator[NewRow],
        queues: set[str],
        params: dict[str, Any],
    ) -> list[int]:
        """COPY (postgres_bulk). The ids are reserved first, so they come back in the batch's order;
        each row is sent as it is checked, so PostgreSQL inserts while the next ones are checked.
        Everything is one transaction (a savepoint inside the caller's): a row that fails its check
        aborts the COPY, and nothing is written; the notification goes with the commit."""
        with transaction.atomic(using=wrapper.alias), self.cursor(wrapper) as cursor:
            cursor.execute(BULK_RESERVE, {**params, "count": count})
            now, ids = cursor.fetchone()
            with wrapper.wrap_database_errors, cursor.cursor.copy(BULK_COPY) as copy:
                copy.set_types(BULK_TYPES)
                no_errors = Jsonb("[]", dumps=_as_is)
                for job_id, row in zip(ids, rows, strict=True):
                    copy.write_row((
                        job_id, row.task, row.queue, Jsonb(row.payload, dumps=_as_is), PENDING, row.priority,
                        row.run_at or now, 0, row.max_attempts, row.concurrency_key,
                        None if row.tags is None else Jsonb(row.tags, dumps=_as_is),
                        None if row.trace_context is None else Jsonb(row.trace_context, dumps=_as_is),
                        no_errors, now, row.fairness_key,
                    ))  # fmt: skip
            cursor.execute(BULK_WAKE, {**params, "queues": sorted(queues)})
        return list(ids)


def _as_is(text: str) -> str:
    """Jsonb's dumps for a value that is JSON text already (checked by validation.dump_json)."""
    return text
