"""A database's outbox as the dashboard shows it (JOBQ["SHARDS"]): the jobs it holds for other
databases, not relayed yet (managers/outbox.py), and how long the oldest has waited."""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db.backends.base.base import BaseDatabaseWrapper

from ..sql import engine_of


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OutboxFigures:
    """The jobs a database's outbox holds for other databases, not relayed yet."""

    jobs: int
    oldest_seconds: float | None  # how long the oldest has waited; None: none waits


def outbox_figures(connection: BaseDatabaseWrapper, now: dt.datetime) -> OutboxFigures:
    """The outbox of ``connection``'s database, at the snapshot's moment ``now`` (its clock)."""
    engine = engine_of(connection)
    jobs, oldest = engine.run(connection, engine.stats.OUTBOX, {}).rows[0]
    since = engine.text_time(oldest)
    return OutboxFigures(
        jobs=jobs, oldest_seconds=None if since is None else max(0.0, (now - since).total_seconds())
    )
