"""SQLite: the queue's connections. WAL lets readers (the admin, jobq_stats) go on while one writer
commits; the busy timeout makes a writer wait for the write lock instead of failing at once."""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ...exceptions import ConfigurationError

MIN_VERSION = (3, 35, 0)  # UPDATE ... RETURNING
MIN_BUSY_SECONDS = 5.0


def version_problem() -> str | None:
    import sqlite3  # the driver, loaded on SQLite only (a PostgreSQL worker never needs it)

    if sqlite3.sqlite_version_info < MIN_VERSION:
        return f"django-jobq needs SQLite 3.35 or later (RETURNING); this Python has {sqlite3.sqlite_version}"
    return None


def configure(wrapper: BaseDatabaseWrapper, lock_seconds: float = MIN_BUSY_SECONDS) -> None:
    """WAL mode (kept by the database file) and a busy timeout of at least ``lock_seconds``."""
    if problem := version_problem():
        raise ConfigurationError(problem)
    wrapper.ensure_connection()
    raw = wrapper.connection
    if getattr(wrapper, "_jobq_configured", None) is raw:
        return
    busy = int(max(lock_seconds, MIN_BUSY_SECONDS) * 1000)
    with wrapper.wrap_database_errors:
        cursor = raw.cursor()
        try:
            if not wrapper.is_in_memory_db():  # type: ignore[attr-defined]
                cursor.execute("PRAGMA journal_mode = WAL")
            (current,) = cursor.execute("PRAGMA busy_timeout").fetchone()
            if current < busy:
                cursor.execute(f"PRAGMA busy_timeout = {busy:d}")
        finally:
            cursor.close()
    raw.create_function("jobq_exception_class", 1, exception_class, deterministic=True)
    wrapper._jobq_configured = raw  # type: ignore[attr-defined]


def exception_class(text: str | None) -> str:
    """The exception class named by the last line of an error text, as PostgreSQL's EXCEPTION_CLASS."""
    last = (text or "").rstrip(" \t\r\n").split("\n")[-1]
    return last.split(":", 1)[0].strip()[:200]


def on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """connection_created receiver: configure every new connection of the queue's SQLite alias."""
    from ...conf import jobq_settings

    if connection.vendor != "sqlite":
        return
    try:
        conf = jobq_settings()
    except ConfigurationError:  # reported by system check jobq.E001; the connection stays usable
        return
    if connection.alias == conf.database:
        configure(connection, conf.lock_timeout)
