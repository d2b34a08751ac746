"""LISTEN for enqueue notifications on a dedicated connection and wake the lanes they name; a
STATE_CHANGED notification (a queue was paused or resumed) makes the worker re-read the queues' state."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connections
from psycopg import sql

from ..conf import jobq_settings, listen_target, on_database
from ..database_context import current_database

logger = logging.getLogger("django_jobq")

# The payload of a pause or resume: no queue can carry it (validation.queue refuses "*"), so it never
# wakes a lane as an enqueue would; the worker re-reads the paused queues and wakes every lane.
STATE_CHANGED = "*"
# The payload of a worker that just took the idle lock (idle_lock.py): every lane claims again. Empty,
# so no queue name (never empty) can carry it.
CLAIM_AGAIN = ""
CONNECT_TIMEOUT = 10  # seconds, unless the alias or the DSN sets connect_timeout
HEALTH_CHECK_SECONDS = 5.0  # a silent connection is probed this often, so a dead one is noticed
# How often a silent listener looks at its stop event: a stopping worker waits for it to end.
STOP_CHECK_SECONDS = 0.1


def connection_params(alias: str) -> dict[str, Any]:
    """psycopg.connect() keyword arguments for a Django database alias."""
    params = dict(connections[alias].get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


def listen_params(application_name: str) -> dict[str, Any]:
    """psycopg.connect() keyword arguments for a LISTEN connection: JOBQ["LISTEN_DATABASE"] (an alias
    or a DSN, for a direct connection past a transaction pooler), else JOBQ["DATABASE"]'s."""
    conf = jobq_settings()
    if conf.listen_database is None:
        params = connection_params(conf.database)
    else:
        kind, value = listen_target(conf.listen_database)
        params = (
            connection_params(value) if kind == "alias" else dict(psycopg.conninfo.conninfo_to_dict(value))
        )
    params.setdefault("connect_timeout", CONNECT_TIMEOUT)  # an unreachable host fails, then is retried
    return {**params, "application_name": application_name}


LostCallback = Callable[[str, BaseException], None]


def log_loss(what: str, exc: BaseException) -> None:
    logger.warning("%s lost (%s); reconnecting", what, exc)


class Listener(threading.Thread):
    """Calls ``wake(payload)`` for every notification (a queue's name, or STATE_CHANGED); ``wake(None)``
    after each (re)connect, since notifications sent while it was disconnected are lost (polling finds
    those jobs, and that state, anyway)."""

    def __init__(
        self,
        wake: Callable[[str | None], None],
        stopping: threading.Event,
        on_lost: LostCallback | None = None,
        on_connected: Callable[[], None] | None = None,
    ):
        """``on_lost(what, exc)`` and ``on_connected()`` report the connection's losses and recoveries
        (a worker summarises them with its other outages); without them each loss is logged."""
        self._database = current_database()
        super().__init__(name="jobq-listener", daemon=True)
        self.wake = wake
        self.stopping = stopping
        self.on_lost = on_lost or log_loss
        self.on_connected = on_connected
        self.connected = threading.Event()
        conf = jobq_settings()
        self.channel = conf.notify_channel

    def run(self) -> None:
        with on_database(self._database):  # the worker's (a thread starts on the home database)
            self._run()

    def _run(self) -> None:
        delay = 0.1
        while not self.stopping.is_set():
            try:
                with psycopg.connect(**listen_params("jobq-listener"), autocommit=True) as conn:
                    # Quoted, so the channel matches pg_notify's exactly (case kept, any name allowed).
                    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
                    self.connected.set()
                    delay = 0.1
                    if self.on_connected is not None:
                        self.on_connected()
                    self.wake(None)
                    self._listen(conn)
            except psycopg.Error as exc:
                self.connected.clear()
                if self.stopping.is_set():
                    return
                self.on_lost("LISTEN connection", exc)
                self.stopping.wait(delay)
                delay = min(delay * 2, 5.0)
        self.connected.clear()

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        last_check = time.monotonic()
        while not self.stopping.is_set():
            for notify in conn.notifies(timeout=STOP_CHECK_SECONDS, stop_after=1000):
                self.wake(notify.payload)
            if time.monotonic() - last_check >= HEALTH_CHECK_SECONDS:
                conn.execute("SELECT 1")  # raises if the server went away without a word
                last_check = time.monotonic()
