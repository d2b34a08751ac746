"""The idle lock: while one of this worker's lanes found less work than it had room for (it may be
asleep until a notification), the worker holds a PostgreSQL advisory lock that makes every enqueue
NOTIFY (sql/postgres/terms.py, wake). While every lane is full, it lets the lock go and enqueues commit
without NOTIFY, whose commits PostgreSQL serialises: a busy queue's producers never pay for wake-ups
nobody waits for, and a lane that runs short claims again before it sleeps.

One worker holding the lock is enough for every enqueue to notify, so a worker never queues behind
another's hold (a waiting session would hold back vacuum all the while): it asks again every
ASK_AGAIN_SECONDS, and takes the lock once the holder lets it go."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from ..conf import jobq_settings, on_database
from ..database_context import current_database
from ..sql.postgres.listen import (
    IDLE_LOCK_RELEASE,
    IDLE_LOCK_SESSION,
    IDLE_LOCK_TAKE,
    IDLE_LOCK_TAKEN,
    IDLE_LOCK_TRY,
    IDLE_LOCK_WAIT,
)
from .listener import HEALTH_CHECK_SECONDS, LostCallback, listen_params, log_loss

logger = logging.getLogger("django_jobq")

# Seconds with every lane full before the lock is let go: a lane at the edge of full does not take
# and release it with every claim.
RELEASE_AFTER = 0.5
# While another worker holds the lock (or waits for it), this one asks again this often, never queueing
# behind it: a waiting session holds back vacuum (sql/postgres/listen.py). Enqueues notify meanwhile.
ASK_AGAIN_SECONDS = 0.1
# The longest wait behind enqueues in flight before asking again; while the lock stays out of reach,
# the lanes also claim again this often (the jobs of enqueues that found nobody asking at that moment).
TAKE_WAIT_SECONDS = 5.0


class IdleLock(threading.Thread):
    """Takes the idle lock when a lane reports itself starved, lets it go RELEASE_AFTER seconds after
    the last starved lane filled up. On taking it, calls ``wake_all`` and notifies every worker, since
    enqueues committed while it was being taken sent no notification. A session the server ends
    (pg_terminate_backend, a restart) is noticed at once: the lock is taken again on a new one."""

    def __init__(
        self,
        wake_all: Callable[[], None],
        on_lost: LostCallback | None = None,
        on_connected: Callable[[], None] | None = None,
    ):
        """``on_lost`` and ``on_connected``: as the Listener's."""
        self._database = current_database()
        super().__init__(name="jobq-idle-lock", daemon=True)
        self.wake_all = wake_all
        self.on_lost = on_lost or log_loss
        self.on_connected = on_connected
        self.stopping = threading.Event()
        self.held = threading.Event()
        self.asked = threading.Event()  # set once an attempt to take the lock found it held elsewhere
        self._mutex = threading.Lock()  # guards _starved and _bell
        self._starved: set[str] = set()
        # The thread's wait ends when its session's socket turns readable or a byte is written to the
        # bell (by report() and stop()); made by the thread, closed when it ends.
        self._bell: tuple[socket.socket, socket.socket] | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._params = {"channel": jobq_settings().notify_channel}

    def report(self, lane: str, starved: bool) -> None:
        """A lane's last claim found less than it asked for (starved), or filled its room."""
        with self._mutex:
            if starved != (lane in self._starved):
                (self._starved.add if starved else self._starved.discard)(lane)
                self._ring()

    def stop(self) -> None:
        """Interrupt a wait for the lock; the connection's end releases it."""
        self.stopping.set()
        with self._mutex:
            self._ring()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                conn.cancel_safe(timeout=2)

    def _ring(self) -> None:
        """End the thread's wait. Holds _mutex."""
        if self._bell is not None:
            with contextlib.suppress(OSError):  # full: a wake-up is pending already
                self._bell[1].send(b"\0")

    def run(self) -> None:
        with on_database(self._database):  # the worker's (a thread starts on the home database)
            self._ring_and_run()

    def _ring_and_run(self) -> None:
        bell = socket.socketpair()
        for end in bell:
            end.setblocking(False)
        with self._mutex:  # made before the first read of _starved: a report after that read rings it
            self._bell = bell
        try:
            self._run(bell[0])
        finally:
            with self._mutex:
                self._bell = None
            for end in bell:
                end.close()

    def _run(self, bell: socket.socket) -> None:
        delay = 0.1
        while not self.stopping.is_set():
            try:
                with psycopg.connect(**listen_params("jobq-idle-lock"), autocommit=True) as conn:
                    conn.execute(IDLE_LOCK_SESSION)
                    self._conn = conn
                    delay = 0.1
                    if self.on_connected is not None:
                        self.on_connected()
                    self._serve(conn, bell)
            except psycopg.Error as exc:
                self.held.clear()
                if self.stopping.is_set():
                    return
                self.on_lost("idle lock connection", exc)
                self.stopping.wait(delay)
                delay = min(delay * 2, 5.0)
            finally:
                self._conn = None
                self.held.clear()

    def _take(self, conn: psycopg.Connection[Any]) -> bool:
        """Take the lock: at once if it is free; by waiting (at most TAKE_WAIT_SECONDS) if enqueues
        in flight hold it; not while another worker holds it or waits for it. True when held."""
        found = (conn.execute(IDLE_LOCK_TRY, self._params).fetchone() or ("worker",))[0]
        if found != "enqueues":
            return bool(found == "taken")
        try:
            with conn.transaction():
                conn.execute(IDLE_LOCK_WAIT, {"wait": f"{int(TAKE_WAIT_SECONDS * 1000)}ms"})
                conn.execute(IDLE_LOCK_TAKE, self._params)
        except psycopg.errors.LockNotAvailable:
            return False
        return True

    def _serve(self, conn: psycopg.Connection[Any], bell: socket.socket) -> None:
        calm_since: float | None = None  # when the last starved lane filled up, while the lock is held
        unheld_since: float | None = None  # since when a lane wants the lock and it is out of reach
        last_check = time.monotonic()
        with selectors.DefaultSelector() as waiting:
            waiting.register(bell, selectors.EVENT_READ)
            waiting.register(conn.fileno(), selectors.EVENT_READ)
            while not self.stopping.is_set():
                with self._mutex:
                    wanted = bool(self._starved)
                if wanted and not self.held.is_set():
                    if self._take(conn):
                        conn.execute(IDLE_LOCK_TAKEN, self._params)
                        self.held.set()
                        self.wake_all()
                        calm_since = unheld_since = None
                        continue
                    self.asked.set()
                    # An enqueue between two asks, with no exclusive hold or request standing, sent
                    # no notification; if the lock stays out of reach (an enqueue's transaction left
                    # open), no grant will come to claim again after it: the lanes do so themselves.
                    now = time.monotonic()
                    if unheld_since is None:
                        unheld_since = now
                    elif now - unheld_since >= TAKE_WAIT_SECONDS:
                        self.wake_all()
                        unheld_since = now
                else:
                    unheld_since = None
                timeout = last_check + HEALTH_CHECK_SECONDS - time.monotonic()
                if wanted and not self.held.is_set():
                    timeout = min(timeout, ASK_AGAIN_SECONDS)
                if self.held.is_set() and not wanted:
                    calm_since = calm_since or time.monotonic()
                    release_in = calm_since + RELEASE_AFTER - time.monotonic()
                    if release_in <= 0:
                        conn.execute(IDLE_LOCK_RELEASE, self._params)
                        self.held.clear()
                        calm_since = None
                        continue
                    timeout = min(timeout, release_in)
                else:
                    calm_since = None
                # Wait for a report (the bell), the release time, the health check, or the session's
                # socket turning readable: this connection never LISTENs and sends nothing unasked, so
                # readable means the server is ending the session (the lock goes with it), and the
                # probe below raises at once instead of at the next health check.
                events = waiting.select(max(0.0, timeout))
                ended = False
                for key, _ in events:
                    if key.fileobj is bell:
                        with contextlib.suppress(BlockingIOError):
                            while bell.recv(4096):
                                pass
                    else:
                        ended = True
                if ended or time.monotonic() - last_check >= HEALTH_CHECK_SECONDS:
                    conn.execute("SELECT 1")  # raises if the server went away: the lock went with it
                    last_check = time.monotonic()
