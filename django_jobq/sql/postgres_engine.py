"""The PostgreSQL engine: statements run on a psycopg cursor with server-side binding, prepared."""

from __future__ import annotations

from typing import Any

import psycopg
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..conf import jobq_settings
from .engines import Engine, Result, Statement


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
            cursor.execute(statement, params)
            if not cursor.description:
                return Result([], [], int(cursor.rowcount))
            names = [column.name for column in cursor.description]
            return Result(names, cursor.fetchall(), int(cursor.rowcount))

    def set_timeouts(self, wrapper: BaseDatabaseWrapper, statement_s: float, lock_s: float) -> None:
        wrapper.ensure_connection()
        params = {"statement_ms": f"{int(statement_s * 1000)}ms", "lock_ms": f"{int(lock_s * 1000)}ms"}
        with wrapper.wrap_database_errors, wrapper.connection.cursor() as cursor:
            cursor.execute(self.statements.SET_TIMEOUTS, params)
