"""The fair queues' figures (JOBQ["QUEUES"][q]["FAIR"]): per fair queue, the keys with the most due
jobs and how long each one's oldest due job has waited (the admin dashboard, jobq_stats, metrics)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import jobq_settings
from ..fairness import SCAN_LIMIT, TOP_KEYS
from ..sql import engine_of


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FairKey:
    queue: str
    key: str
    due: int  # due jobs (at least, when partial)
    wait: float | None  # seconds the oldest due job has waited
    partial: bool  # the queue has more due jobs than SCAN_LIMIT: due counts only those read


def fair_keys(connection: BaseDatabaseWrapper, now: dt.datetime, top: int = TOP_KEYS) -> tuple[FairKey, ...]:
    """The busiest keys of every fair queue, busiest first within each queue (queues by name)."""
    engine = engine_of(connection)
    found = []
    for queue in sorted(jobq_settings().fair_queues()):
        clock = timezone.now() if jobq_settings().clock == "python" else None
        params = {"queue": queue, "top": top, "scan": SCAN_LIMIT, "now": clock}
        for key, due, oldest, partial in engine.run(connection, engine.stats.FAIR_KEYS, params).rows:
            oldest = engine.text_time(oldest)
            wait = None if oldest is None else max(0.0, (now - oldest).total_seconds())
            found.append(FairKey(queue=queue, key=key, due=due, wait=wait, partial=bool(partial)))
    return tuple(found)
