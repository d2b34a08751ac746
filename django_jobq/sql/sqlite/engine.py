"""The SQLite engine: statements through Django's SQLite backend, multi-step ones under BEGIN IMMEDIATE."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Iterator, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..engine import Engine, Result, Script, Statement, Unsupported
from .enqueue import HELD

_predicates: dict[str, str] = {}  # database file -> the dedupe index's WHERE, as created


def _dedupe_predicate(wrapper: BaseDatabaseWrapper) -> str:
    """The WHERE of the partial index jobq_job_dedupe exactly as the migration wrote it. SQLite
    matches an ON CONFLICT target to a partial index only if the two WHERE clauses are the same
    expression, and Django versions write the condition differently (``NOT "key_released"``,
    ``"key_released" = 0``)."""
    name = str(wrapper.settings_dict["NAME"])
    if name not in _predicates:
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'jobq_job_dedupe'")
            row = cursor.fetchone()
        text = row[0] if row and row[0] else ""
        where = text.partition(" WHERE ")[2].strip()
        if not where:
            return HELD  # no such index yet (a migration is running): SQLite will say so
        _predicates[name] = where
    return _predicates[name]


class SqliteEngine(Engine):
    """SQLite through Django's backend: named parameters (lists travel as JSON text, times as
    Django's own text format), multi-step statements under BEGIN IMMEDIATE."""

    def run(self, wrapper: BaseDatabaseWrapper, statement: Statement, params: dict[str, Any]) -> Result:
        if isinstance(statement, Unsupported):
            self.capabilities.require(statement.feature, statement.what)
        adapted = {name: _sqlite_value(value) for name, value in params.items()}
        if isinstance(statement, str):
            return self._one(wrapper, statement, adapted)
        assert isinstance(statement, Script)
        with self._immediate(wrapper):
            return statement.combine([self._one(wrapper, step, adapted) for step in statement.steps])

    @staticmethod
    def _one(wrapper: BaseDatabaseWrapper, sql: str, params: dict[str, Any]) -> Result:
        if HELD in sql:
            sql = sql.replace(HELD, _dedupe_predicate(wrapper))
        with wrapper.cursor() as cursor:
            cursor.execute(sql, params)
            if cursor.description is None:
                return Result([], [], cursor.rowcount)
            names = [column[0] for column in cursor.description]
            return Result(names, [tuple(row) for row in cursor.fetchall()], cursor.rowcount)

    @staticmethod
    @contextlib.contextmanager
    def _immediate(wrapper: BaseDatabaseWrapper) -> Iterator[None]:
        """The steps' transaction: BEGIN IMMEDIATE takes the database's one write lock before the
        first step reads, so the steps see and write one state no other writer changes between them
        (a deferred transaction that read first could not upgrade while another writes). Inside the
        caller's transaction the steps are part of it (a savepoint keeps a failed step's writes out)."""
        if wrapper.in_atomic_block:
            from django.db import transaction

            with transaction.atomic(using=wrapper.alias):
                yield
            return
        wrapper.ensure_connection()
        with wrapper.cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")

    def setup_problems(self, alias: str) -> tuple[list[str], list[str]]:
        from django.db import connections

        from .setup import version_problem

        errors = [problem] if (problem := version_problem()) else []
        options = connections[alias].settings_dict.get("OPTIONS") or {}
        warnings = []
        if str(options.get("transaction_mode") or "").upper() != "IMMEDIATE":
            warnings.append(
                f"database {alias!r} (SQLite) opens DEFERRED transactions: a transaction.atomic() "
                "block that reads before it writes fails with 'database is locked' when another "
                'writer commits first; set OPTIONS {"transaction_mode": "IMMEDIATE"}'
            )
        return errors, warnings

    def set_timeouts(self, wrapper: BaseDatabaseWrapper, statement_s: float, lock_s: float) -> None:
        # SQLite has no statement timeout; a lock wait is bounded by the busy timeout.
        from .setup import configure

        configure(wrapper, lock_s)

    def wake_local(self, alias: str, queues: Sequence[str]) -> None:
        from django.db import transaction

        from ...notify import wakeup

        names = list(queues)
        transaction.on_commit(lambda: wakeup.notify(names), using=alias)

    def text_time(self, value: Any) -> dt.datetime | None:
        if value is None:
            return None
        # A datetime column read directly comes parsed (naive, UTC) by Django's converters; an
        # expression's value comes as text.
        parsed = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def sqlite_time(value: dt.datetime) -> str:
    """An aware datetime in the text form SQLite's statements compare and Django's ORM reads: UTC,
    'YYYY-MM-DD HH:MM:SS.ffffff' (always six digits, so text order is time order)."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def _sqlite_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return sqlite_time(value)
    if isinstance(value, list | tuple):
        return json.dumps([sqlite_time(v) if isinstance(v, dt.datetime) else v for v in value])
    if isinstance(value, bool):
        return int(value)
    return value
