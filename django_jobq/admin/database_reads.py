"""The dashboard's figures of every other database (JOBQ["SHARDS"]), read at once, each on a daemon
thread of its own, and waited for at most READ_SECONDS: a database that is slow to answer is a row
that says so while the page shows the others.

A database whose read has not ended is not read again meanwhile (one that does not answer holds one
thread, never one per page view; its statements are bounded by JOBQ["STATEMENT_TIMEOUT"]), and a page
does not wait for it again; a read that ended after its page gave up is shown by the next page."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable

from django.db import DatabaseError, connections

from .. import dashboard
from ..conf import jobq_settings, on_database
from ..replica import read_alias
from ..sql import engine_of

logger = logging.getLogger("django_jobq")

READ_SECONDS = 3.0  # how long a page waits for the other databases' figures


class _Read:
    """One database's read, on a daemon thread; ``answer`` is its snapshot, or why there is none."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.done = threading.Event()
        self.answer: dashboard.Snapshot | str = "not read yet"
        threading.Thread(target=self._run, name=f"jobq-console-{alias}", daemon=True).start()

    def _run(self) -> None:
        try:
            with on_database(self.alias):
                conf = jobq_settings()
                wrapper = connections[read_alias()]  # this thread's, closed below: none is kept
                if conf.pool_mode != "transaction":  # no session settings through a transaction pooler
                    engine_of(wrapper).set_timeouts(wrapper, conf.statement_timeout, conf.lock_timeout)
                self.answer = dashboard.snapshot()
        except Exception as exc:  # a row of the page, never its error
            if not isinstance(exc, DatabaseError):
                logger.warning("console: the figures of %s could not be read", self.alias, exc_info=True)
            text = str(exc).strip()
            self.answer = text.splitlines()[0] if text else type(exc).__name__
        finally:
            connections.close_all()
            self.done.set()


_reads: dict[str, _Read] = {}  # each database's read under way, or ended and not shown yet
_lock = threading.Lock()
_pid = os.getpid()  # the process _reads belong to (a forked child's are not its own)


def snapshots(aliases: Iterable[str]) -> dict[str, dashboard.Snapshot | str]:
    """Each of ``aliases``'s snapshot, or why there is none: its error's first line, or that it did
    not answer within READ_SECONDS (a page waits that long only for the reads it starts)."""
    global _pid
    started: list[_Read] = []
    reads: dict[str, _Read] = {}
    with _lock:
        if _pid != os.getpid():
            _pid = os.getpid()
            _reads.clear()
        for alias in aliases:
            if (read := _reads.get(alias)) is None:
                read = _reads[alias] = _Read(alias)
                started.append(read)
            reads[alias] = read
    deadline = time.monotonic() + READ_SECONDS
    for read in started:
        read.done.wait(max(0.0, deadline - time.monotonic()))
    found: dict[str, dashboard.Snapshot | str] = {}
    with _lock:
        for alias, read in reads.items():
            if read.done.is_set():
                found[alias] = read.answer
                if _reads.get(alias) is read:
                    del _reads[alias]  # shown: the next page reads anew
            else:
                found[alias] = f"did not answer within {READ_SECONDS:g} s"
    return found
