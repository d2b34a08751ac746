"""Where the console and the metrics read, and how far behind that database is.

The read alias, decided here and nowhere else: JOBQ["READ_DATABASE"] when set; else the database
routers' ``db_for_read`` for jobq's models, when it names another alias than their ``db_for_write``
and that one is JOBQ["DATABASE"] (a primary/replica router); else JOBQ["DATABASE"] itself. Actions
never read it: they select and write on JOBQ["DATABASE"].
"""

from __future__ import annotations

import dataclasses

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest

from .conf import jobq_settings
from .models import Job
from .sql import engine_of


def read_alias() -> str:
    """The database alias the console's pages, jobq_stats and the metrics read."""
    conf = jobq_settings()
    if conf.read_database is not None:
        return conf.read_database
    read, write = router.db_for_read(Job), router.db_for_write(Job)
    if write == conf.database and read != write and read in connections:
        return read
    return conf.database


def console_alias(request: HttpRequest) -> str:
    """The alias a console request reads: for a GET or HEAD (a page), read_alias(), the same for the
    whole request; for anything else (an action, a form's POST), JOBQ["DATABASE"]: what a change acts
    on is selected where it is written, never among a replica's older rows."""
    if request.method not in ("GET", "HEAD"):
        return jobq_settings().database
    alias: str | None = getattr(request, "_jobq_read_alias", None)
    if alias is None:
        alias = read_alias()
        request._jobq_read_alias = alias  # type: ignore[attr-defined]
    return alias


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaLag:
    """A standby's replay delay, read on the standby."""

    alias: str
    seconds: float | None  # 0: replayed all it received; None: unknown (nothing replayed yet)

    def warns(self) -> bool:
        """Worth telling the reader: unknown, or above JOBQ["READ_LAG_WARNING_SECONDS"]."""
        return self.seconds is None or self.seconds > jobq_settings().read_lag_warning_seconds


def replica_lag(connection: BaseDatabaseWrapper) -> ReplicaLag | None:
    """How far the database of ``connection`` is behind, or None when it is JOBQ["DATABASE"] or no
    standby (not in recovery): one statement that reads no table (sql/*/stats.py REPLICA_LAG)."""
    if connection.alias == jobq_settings().database:
        return None
    engine = engine_of(connection)
    (in_recovery, seconds), *_ = engine.run(connection, engine.stats.REPLICA_LAG, {}).rows
    return ReplicaLag(alias=connection.alias, seconds=seconds) if in_recovery else None
