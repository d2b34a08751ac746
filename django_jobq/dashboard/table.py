"""jobq_job's upkeep for ``manage.py jobq_stats``: its size, its dead row versions and its last vacuum
(PostgreSQL; None on an engine without such figures)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..sql import engine_of
from ..sql.engine import Unsupported


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TableFigures:
    table_bytes: int  # the table's files (heap, free-space and visibility maps, TOAST)
    index_bytes: int
    live_rows: int  # as the statistics collector counts them (an estimate between vacuums)
    dead_rows: int  # row versions no transaction sees any more, waiting for a vacuum
    vacuumed_at: dt.datetime | None  # the last vacuum, by hand or by autovacuum
    analysed_at: dt.datetime | None
    autovacuums: int  # since the statistics were last reset
    autovacuum: bool = True  # autovacuum vacuums the table (False: the server's, or the table's, is off)
    oldest_xact_seconds: float | None = None  # the oldest other open transaction holding back vacuum

    @property
    def dead_share(self) -> float:
        """Dead row versions as a share of all the table's row versions (0 for an empty table)."""
        total = self.live_rows + self.dead_rows
        return self.dead_rows / total if total else 0.0


def table_figures(connection: BaseDatabaseWrapper, params: dict[str, Any]) -> TableFigures | None:
    engine = engine_of(connection)
    statement = engine.stats.TABLE
    if isinstance(statement, Unsupported):
        return None
    rows = engine.run(connection, statement, params).rows
    if not rows:  # statistics not collected (track_counts off)
        return None
    table, indexes, live, dead, vacuumed, analysed, autovacuums, autovacuum, oldest_xact = rows[0]
    return TableFigures(
        table_bytes=table, index_bytes=indexes, live_rows=live, dead_rows=dead,
        vacuumed_at=vacuumed, analysed_at=analysed, autovacuums=autovacuums, autovacuum=autovacuum,
        oldest_xact_seconds=oldest_xact,
    )  # fmt: skip
