"""django-jobq's own autocommit connections, for statements that must commit whatever the caller's
transaction does (a rate-limit permit is spent even if the caller rolls back).

A small pool per process and database alias, shared by every thread: built from the alias's Django
settings (listener.connection_params), bounded by the JOBQ["STATEMENT_TIMEOUT"] and ["LOCK_TIMEOUT"]
of the worker's own connections, at most POOL_SIZE connections open. A thread takes a connection for
one call and gives it back, so short-lived threads (a WSGI server's, sync_to_async's) leave nothing
behind. A connection that broke is closed, never reused; a forked child starts with an empty pool.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg

from .conf import jobq_settings
from .listener import connection_params
from .sql import engine_for
from .sql.postgres_workers import SET_TIMEOUTS

POOL_SIZE = 8  # connections per process and alias, at most; more callers wait for a free one
CONNECT_TIMEOUT = 5  # seconds, unless the alias's OPTIONS set connect_timeout

Connection = psycopg.Connection[tuple[Any, ...]]


class PoolTimeout(psycopg.OperationalError):
    """Every connection of the pool stayed busy for JOBQ["STATEMENT_TIMEOUT"] seconds."""


class Pool:
    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.idle: list[Connection] = []
        self.opened = 0
        self.ready = threading.Condition()

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection for this thread's call; psycopg.OperationalError when none can be had."""
        conn = self._take()
        try:
            yield conn
        finally:
            self._give(conn)

    def _take(self) -> Connection:
        with self.ready:
            deadline = time.monotonic() + jobq_settings().statement_timeout
            while not self.idle and self.opened >= POOL_SIZE:
                left = deadline - time.monotonic()
                if left <= 0 or not self.ready.wait(left):
                    raise PoolTimeout(f"all {POOL_SIZE} of django-jobq's autocommit connections stayed busy")
            if self.idle:
                return self.idle.pop()
            self.opened += 1
        try:
            return self._connect()
        except BaseException:
            with self.ready:
                self.opened -= 1
                self.ready.notify()
            raise

    def _give(self, conn: Connection) -> None:
        healthy = not conn.closed and not conn.broken
        if not healthy:
            conn.close()
        with self.ready:
            if healthy:
                self.idle.append(conn)
            else:
                self.opened -= 1
            self.ready.notify()

    def _connect(self) -> Connection:
        engine_for(self.alias).capabilities.require("rate_limits", "django-jobq's autocommit connections")
        conf = jobq_settings()
        params = {"application_name": "jobq-autocommit", **connection_params(self.alias)}
        params.setdefault("connect_timeout", CONNECT_TIMEOUT)
        # Django turns prepared statements off (None); these few statements are prepared on the server
        # (execute(prepare=True)) unless JOBQ["PREPARED_STATEMENTS"] is off: planning costs more than
        # running them.
        params["prepare_threshold"] = 5 if conf.prepared_statements else None
        conn = psycopg.connect(**params, autocommit=True)
        if conf.pool_mode == "transaction":
            return conn  # no session settings through a transaction pooler (BaseJobManager.bound_statements)
        try:
            timeouts = {
                "statement_ms": f"{int(conf.statement_timeout * 1000)}ms",
                "lock_ms": f"{int(conf.lock_timeout * 1000)}ms",
            }
            conn.execute(SET_TIMEOUTS, timeouts)
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self.ready:
            idle, self.idle = self.idle, []
            self.opened -= len(idle)
        for conn in idle:
            conn.close()


_pools: dict[str, Pool] = {}
_inherited: list[Pool] = []  # a parent's pools, kept from the collector: closing would end its sessions
_lock = threading.Lock()


def pool(alias: str) -> Pool:
    """The pool of this process for ``alias``."""
    with _lock:
        found = _pools.get(alias)
        if found is None:
            found = _pools[alias] = Pool(alias)
        return found


def close_all() -> None:
    """Close the idle connections of every pool (at exit; tests before the test database goes)."""
    with _lock:
        pools = list(_pools.values())
    for each in pools:
        each.close()


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _inherited.extend(_pools.values())
    _pools.clear()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(close_all)
