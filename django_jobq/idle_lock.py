"""The idle lock: while one of this worker's lanes found less work than it had room for (it may be
asleep until a notification), the worker holds a PostgreSQL advisory lock that makes every enqueue
NOTIFY (sql.postgres_terms.wake). While every lane is full, it lets the lock go and enqueues commit
without NOTIFY, whose commits PostgreSQL serialises: a busy queue's producers never pay for wake-ups
nobody waits for, and a lane that runs short claims again before it sleeps."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from .conf import jobq_settings
from .listener import HEALTH_CHECK_SECONDS, listen_params
from .sql.postgres_listen import IDLE_LOCK_RELEASE, IDLE_LOCK_SESSION, IDLE_LOCK_TAKE, IDLE_LOCK_TAKEN

logger = logging.getLogger("django_jobq")

# Seconds with every lane full before the lock is let go: a lane at the edge of full does not take
# and release it with every claim.
RELEASE_AFTER = 0.5


class IdleLock(threading.Thread):
    """Takes the idle lock when a lane reports itself starved, lets it go RELEASE_AFTER seconds after
    the last starved lane filled up. On taking it, calls ``wake_all`` and notifies every worker, since
    enqueues committed while it was being taken sent no notification."""

    def __init__(self, wake_all: Callable[[], None]):
        super().__init__(name="jobq-idle-lock", daemon=True)
        self.wake_all = wake_all
        self.stopping = threading.Event()
        self.held = threading.Event()
        self._cond = threading.Condition()
        self._starved: set[str] = set()
        self._conn: psycopg.Connection[Any] | None = None
        self._params = {"channel": jobq_settings().notify_channel}

    def report(self, lane: str, starved: bool) -> None:
        """A lane's last claim found less than it asked for (starved), or filled its room."""
        with self._cond:
            if starved != (lane in self._starved):
                (self._starved.add if starved else self._starved.discard)(lane)
                self._cond.notify_all()

    def stop(self) -> None:
        """Interrupt a wait for the lock; the connection's end releases it."""
        self.stopping.set()
        with self._cond:
            self._cond.notify_all()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                conn.cancel_safe(timeout=2)

    def run(self) -> None:
        delay = 0.1
        while not self.stopping.is_set():
            try:
                with psycopg.connect(**listen_params("jobq-idle-lock"), autocommit=True) as conn:
                    conn.execute(IDLE_LOCK_SESSION)
                    self._conn = conn
                    delay = 0.1
                    self._serve(conn)
            except psycopg.Error as exc:
                self.held.clear()
                if self.stopping.is_set():
                    return
                logger.warning("idle lock connection lost (%s); reconnecting in %.1fs", exc, delay)
                self.stopping.wait(delay)
                delay = min(delay * 2, 5.0)
            finally:
                self._conn = None
                self.held.clear()

    def _serve(self, conn: psycopg.Connection[Any]) -> None:
        calm_since: float | None = None  # when the last starved lane filled up, while the lock is held
        last_check = time.monotonic()
        while not self.stopping.is_set():
            with self._cond:
                wanted = bool(self._starved)
            if wanted and not self.held.is_set():
                conn.execute(IDLE_LOCK_TAKE, self._params)
                conn.execute(IDLE_LOCK_TAKEN, self._params)
                self.held.set()
                self.wake_all()
                calm_since = None
                continue
            timeout = HEALTH_CHECK_SECONDS
            if self.held.is_set() and not wanted:
                calm_since = calm_since or time.monotonic()
                timeout = calm_since + RELEASE_AFTER - time.monotonic()
                if timeout <= 0:
                    conn.execute(IDLE_LOCK_RELEASE, self._params)
                    self.held.clear()
                    calm_since = None
                    continue
            else:
                calm_since = None
            with self._cond:
                if bool(self._starved) == wanted and not self.stopping.is_set():
                    self._cond.wait(timeout)
            if time.monotonic() - last_check >= HEALTH_CHECK_SECONDS:
                conn.execute("SELECT 1")  # raises if the server went away: the lock went with it
                last_check = time.monotonic()
