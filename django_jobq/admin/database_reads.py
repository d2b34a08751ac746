"""The dashboard's figures of every other database (JOBQ["SHARDS"]), read at once, each on a thread of
its own, and waited for at most READ_SECONDS: a database that is slow to answer is a row that says so
while the page shows the others. A database whose last read has not ended yet is not read again
meanwhile, so one that does not answer holds one thread, never one per page view."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from django.db import DatabaseError, connections

from .. import dashboard
from ..conf import on_database

READ_SECONDS = 3.0  # how long a page waits for the other databases' figures
_reads: dict[str, Future[dashboard.Snapshot]] = {}  # each database's latest read
_lock = threading.Lock()
_executor: tuple[int, ThreadPoolExecutor] | None = None  # the readers, and the pid that made them


def snapshots(aliases: Iterable[str]) -> dict[str, dashboard.Snapshot | str]:
    """Each of ``aliases``'s snapshot, or why there is none: its database error's first line, or
    that it did not answer within READ_SECONDS. Any other error is raised."""
    reads: dict[str, Future[dashboard.Snapshot]] = {}
    with _lock:
        for alias in aliases:
            if (running := _reads.get(alias)) is None or running.done():
                _reads[alias] = _readers().submit(_read, alias)
            reads[alias] = _reads[alias]
    wait(reads.values(), timeout=READ_SECONDS)
    found: dict[str, dashboard.Snapshot | str] = {}
    for alias, read in reads.items():
        if not read.done():
            found[alias] = f"did not answer within {READ_SECONDS:g} s"
        elif (exc := read.exception()) is None:
            found[alias] = read.result()
        elif isinstance(exc, DatabaseError):
            found[alias] = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        else:
            raise exc
    return found


def _read(alias: str) -> dashboard.Snapshot:
    try:
        with on_database(alias):  # from its read alias (a replica of the home database)
            return dashboard.snapshot()
    finally:
        connections.close_all()  # this thread's, opened for this read: none is kept between pages


def _readers() -> ThreadPoolExecutor:
    """The reading threads of this process (a forked child makes its own: the parent's are not its)."""
    global _executor
    if _executor is None or _executor[0] != os.getpid():
        _reads.clear()
        _executor = (os.getpid(), ThreadPoolExecutor(thread_name_prefix="jobq-console-database"))
    return _executor[1]
