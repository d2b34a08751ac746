"""The scheduler's statements: lock due schedules, record ticks, advance, sync the settings."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..options import ScheduleOptions
from .base import BaseJobManager


class DueSchedule(NamedTuple):
    """A schedule row locked by a pass (DUE_SCHEDULES)."""

    id: int
    name: str
    task: str
    payload: dict[str, Any]
    queue: str | None
    priority: int | None
    cron: str | None
    at: str | None
    timezone: str | None
    missed: str
    next_run_at: dt.datetime | None
    now: dt.datetime  # the pass's clock

    @property
    def spec(self) -> str:
        return self.cron or self.at or ""


class ScheduleStatementsManager(BaseJobManager):
    def due_schedules(self, batch: int, tried: Sequence[int] = ()) -> list[DueSchedule]:
        """Lock (until the caller's transaction ends) up to ``batch`` due schedules no other pass holds,
        leaving out the ids ``tried`` (taken by an earlier batch of the same pass)."""
        rows = self._execute(self._sql().DUE_SCHEDULES, {"batch": batch, "tried": list(tried)})
        time = self._engine().text_time  # the engine's time values as aware datetimes
        return [
            DueSchedule._make((*row[:3], json.loads(row[3]), *row[4:10], time(row[10]), time(row[11])))
            for row in rows
        ]

    def record_ticks(self, name: str, ticks: Sequence[dt.datetime]) -> list[dt.datetime]:
        """Those of ``ticks`` never recorded for schedule ``name`` before, now recorded."""
        if not ticks:
            return []
        rows = self._execute(self._sql().RECORD_TICKS, {"name": name, "ticks": list(ticks)})
        time = self._engine().text_time  # the engine's time values as aware datetimes
        return sorted(t for row in rows if (t := time(row[0])) is not None)

    def set_tick_jobs(self, name: str, jobs: dict[dt.datetime, int | None]) -> None:
        if jobs:
            params = {"name": name, "ticks": list(jobs), "job_ids": list(jobs.values())}
            self._execute(self._sql().SET_TICK_JOBS, params)

    def advance_schedules(self, moves: Iterable[tuple[int, dt.datetime, dt.datetime | None]]) -> None:
        """(schedule id, next_run_at, last tick published or None) for each schedule of the pass."""
        moves = list(moves)
        if moves:
            ids, nexts, lasts = (list(column) for column in zip(*moves, strict=True))
            self._execute(self._sql().ADVANCE_SCHEDULES, {"ids": ids, "nexts": nexts, "lasts": lasts})

    def prune_ticks(self, names: Sequence[str], keep_seconds: float) -> int:
        if not names:
            return 0
        return self._rowcount(self._sql().PRUNE_TICKS, {"names": list(names), "keep": keep_seconds})

    def sync_schedules(self, schedules: Iterable[ScheduleOptions]) -> tuple[list[str], list[str]]:
        """Write the settings' schedules into the table: (names written, names disabled because the
        settings no longer have them). Unchanged rows are not written."""
        entries = sorted(schedules, key=lambda s: s.name)
        params: dict[str, Any] = {
            "names": [s.name for s in entries],
            "tasks": [s.task for s in entries],
            "payloads": [json.dumps(s.payload, sort_keys=True) for s in entries],
            "queues": [s.queue for s in entries],
            "priorities": [s.priority for s in entries],
            "crons": [s.cron for s in entries],
            "ats": [s.at for s in entries],
            "timezones": [s.timezone for s in entries],
            "misseds": [s.missed for s in entries],
            "enableds": [s.enabled for s in entries],
        }
        sql = self._sql()
        written = [row[0] for row in self._execute(sql.SYNC_SCHEDULES, params)] if entries else []
        disabled = [
            row[0] for row in self._execute(sql.DISABLE_REMOVED_SCHEDULES, {"names": params["names"]})
        ]
        return written, disabled
