"""The side writer: a task's progress and lease writes, run on a connection of the worker's own."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.db import Error as DatabaseError
from django.db import connections

from ..conf import jobq_settings
from ..database_context import carrying_database
from ..models import Job

logger = logging.getLogger("django_jobq")


class SideWriter:
    """Runs short writes about a running job (progress, lease renewal) on one thread with its own
    connection, so they commit at once and never inside the task's transaction: a task that holds a
    transaction open never holds its own job row locked against the heartbeat and the reaper."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobq-side")

    def __call__(self, op: Callable[[], bool]) -> bool:
        """Run ``op``; False when the database failed or did not answer within the statement timeout.
        A JobqError (a bad value) reaches the caller."""
        try:
            return self._pool.submit(carrying_database(self._run), op).result(
                timeout=jobq_settings().statement_timeout + 5
            )
        except (DatabaseError, FutureTimeout) as exc:
            logger.warning("progress/lease write failed: %s", exc)
            return False

    @staticmethod
    def _run(op: Callable[[], bool]) -> bool:
        try:
            Job.objects.bound_statements()
            return op()
        except DatabaseError:
            connections[jobq_settings().database].close()
            raise

    def close(self) -> None:
        self._pool.submit(connections.close_all)
        self._pool.shutdown(wait=True, cancel_futures=False)
