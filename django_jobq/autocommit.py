"""django-jobq's own autocommit connections, for statements that must commit whatever the caller's
transaction does (a rate-limit permit is spent even if the caller rolls back).

A small pool per process and database alias, shared by every thread: built from the alias's Django
settings (listener.connection_params), bounded by the JOBQ["STATEMENT_TIMEOUT"] and ["LOCK_TIMEOUT"]
of the worker's own connections, at most POOL_SIZE connections open. A thread takes a connection for
one call and gives it back, so short-lived threads (a WSGI server's, sync_to_async's) leave nothing
behind. A forked child starts with an empty pool.

A pooled session can end while it sits idle (a server restart, pg_terminate_backend,
idle_session_timeout, a failover): a connection is checked before it is handed out, so a call fails
only when no new session can be had. A connection that broke during a call is closed, never reused,
and the call fails (the statement may have committed: no retry). The pool closes when Django connects
to create or drop a database (a test database's teardown), so none of its sessions is in the way.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import psycopg
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.signals import connection_created

from .conf import jobq_settings
from .notify.listener import connection_params
from .sql import engine_for
from .sql.postgres.workers import SET_TIMEOUTS

POOL_SIZE = 8  # connections per process and alias, at most; more callers wait for a free one
CONNECT_TIMEOUT = 5  # seconds, unless the alias's OPTIONS set connect_timeout
CHECK_AFTER = 30.0  # seconds idle after which a round trip checks a connection before use
MAX_IDLE = 600.0  # seconds idle after which a connection is closed (the pool shrinks after a burst)
MAX_LIFETIME = 3600.0  # seconds after which a connection is closed once given back

Connection = psycopg.Connection[tuple[Any, ...]]


class PoolTimeout(psycopg.OperationalError):
    """Every connection of the pool stayed busy for JOBQ["STATEMENT_TIMEOUT"] seconds."""


class _Idle(NamedTuple):
    conn: Connection
    born: float  # time.monotonic() when connected
    since: float  # ... when given back


def _server_spoke(conn: Connection) -> bool:
    """Whether an idle session has something to read: the server's last words (FATAL, then the end of
    the stream), since an autocommit session that does not LISTEN is sent nothing it did not ask for."""
    fd = conn.fileno()
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # Windows


def _usable(idle: _Idle) -> bool:
    """Whether an idle connection may be handed out: open, not too old, its session alive."""
    conn, now = idle.conn, time.monotonic()
    if conn.closed or conn.broken or now - idle.born > MAX_LIFETIME or now - idle.since > MAX_IDLE:
        return False
    if _server_spoke(conn):  # a restart, pg_terminate_backend, idle_session_timeout: at no cost
        return False
    if now - idle.since > CHECK_AFTER:  # a session lost without a word (its host restarted or failed over)
        try:
            conn.execute("")
        except psycopg.Error:
            return False
    return True


class Pool:
    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.idle: list[_Idle] = []  # the most recently given back last
        self.opened = 0  # idle and in use
        self.generation = 0  # close() ends one: a connection of an earlier one is closed when given back
        self.ready = threading.Condition()

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection for this thread's call; psycopg.OperationalError when none can be had."""
        conn, born, generation = self._take()
        try:
            yield conn
        finally:
            self._give(conn, born, generation)

    def _take(self) -> tuple[Connection, float, int]:
        deadline = time.monotonic() + jobq_settings().statement_timeout
        while True:
            with self.ready:
                while not self.idle and self.opened >= POOL_SIZE:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self.ready.wait(left):
                        raise PoolTimeout(
                            f"all {POOL_SIZE} of django-jobq's autocommit connections stayed busy"
                        )
                generation = self.generation
                idle = self.idle.pop() if self.idle else None
                if idle is None:
                    self.opened += 1
            if idle is None:
                break
            if _usable(idle):  # outside the lock: it may take a round trip
                return idle.conn, idle.born, generation
            self._discard(idle.conn)  # and try the next one, or a new session
        try:
            return self._connect(), time.monotonic(), generation
        except BaseException:
            with self.ready:
                self.opened -= 1
                self.ready.notify()
            raise

    def _give(self, conn: Connection, born: float, generation: int) -> None:
        now = time.monotonic()
        stale: list[Connection] = []
        with self.ready:
            if conn.closed or conn.broken or generation != self.generation or now - born > MAX_LIFETIME:
                stale.append(conn)
            else:
                self.idle.append(_Idle(conn, born, now))
            while self.idle and now - self.idle[0].since > MAX_IDLE:  # unused since a burst
                stale.append(self.idle.pop(0).conn)
            self.opened -= len(stale)
            self.ready.notify(1 + len(stale))
        for each in stale:
            each.close()

    def _discard(self, conn: Connection) -> None:
        conn.close()
        with self.ready:
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
        """Close the idle connections; those in use are closed when given back."""
        with self.ready:
            idle, self.idle = self.idle, []
            self.opened -= len(idle)
            self.generation += 1
            self.ready.notify(len(idle))
        for each in idle:
            each.conn.close()


_pools: dict[str, Pool] = {}
_inherited: list[Pool] = []  # a parent's pools, kept from the collector: closing would end its sessions
_lock = threading.Lock()
_CALLERS = threading.BoundedSemaphore(POOL_SIZE)  # rows_within's calls under way


def pool(alias: str) -> Pool:
    """The pool of this process for ``alias``."""
    with _lock:
        found = _pools.get(alias)
        if found is None:
            found = _pools[alias] = Pool(alias)
        return found


class NoAnswer(psycopg.OperationalError):
    """A bounded call (rows_within) got no answer in time, or found every caller thread busy."""


def rows_within(alias: str, statement: str, params: dict[str, Any], seconds: float) -> list[tuple[Any, ...]]:
    """``statement``'s rows (none for a statement that returns none), run alone on ``alias``'s pool,
    waiting for them at most ``seconds``: NoAnswer past that. The call runs on a daemon thread of its
    own, so a link that stops forwarding (where no timeout of the server's or the socket's fires)
    holds up that thread, never the caller; it keeps its connection until the link answers or breaks.
    At most POOL_SIZE such calls run at once: with every one of them held up, a further call is
    NoAnswer at once, never queued (a call queued behind a cut link would run long after its caller
    gave up on it)."""
    if not _CALLERS.acquire(blocking=False):
        raise NoAnswer(f"no answer from database {alias!r}: all {POOL_SIZE} calls to it are waiting")
    prepare = bool(jobq_settings().prepared_statements)
    answer: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            with pool(alias).connection() as conn:
                cursor = conn.execute(statement, params, prepare=prepare)
                answer.append(cursor.fetchall() if cursor.description else [])
        except BaseException as exc:  # handed to the caller, if it still waits
            answer.append(exc)
        finally:
            _CALLERS.release()
            done.set()

    threading.Thread(target=run, name=f"jobq-autocommit-{alias}", daemon=True).start()
    if not done.wait(seconds):
        raise NoAnswer(f"no answer from database {alias!r} within {seconds:g}s")
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]  # type: ignore[no-any-return]


def close_all() -> None:
    """Close every pool's connections (those in use once given back); the pools open again on use.
    Called at exit and when Django connects to create or drop a database."""
    with _lock:
        pools = list(_pools.values())
    for each in pools:
        each.close()


def _close_before_create_or_drop(connection: Any, **kwargs: Any) -> None:
    """Django creates, clones and drops databases (the test databases) on a connection to the server's
    maintenance database (NO_DB_ALIAS, creation._nodb_cursor): none of the pool's sessions may be
    in the way of that DROP DATABASE."""
    if connection.alias == NO_DB_ALIAS:
        close_all()


def _after_fork() -> None:
    global _lock, _CALLERS
    _lock = threading.Lock()
    _CALLERS = threading.BoundedSemaphore(POOL_SIZE)  # the parent's calls are not the child's
    _inherited.extend(_pools.values())
    _pools.clear()


os.register_at_fork(after_in_child=_after_fork)
atexit.register(close_all)
connection_created.connect(_close_before_create_or_drop, dispatch_uid="django_jobq.autocommit")
