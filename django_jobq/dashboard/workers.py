"""The workers of the dashboard and jobq_stats: one per process, as its last heartbeat described it,
and the supervisors (jobq_worker --processes) that started them, as they last told their processes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import jobq_settings
from ..sql import engine_of

WORKERS_RECENT_SECONDS = 600  # workers whose heartbeat is older than this are not listed
WORKERS_LIMIT = 50  # and at most this many are
# A worker is "alive" while its last heartbeat is younger than this many heartbeat intervals.
ALIVE_HEARTBEATS = 3


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SupervisorFigures:
    """A supervisor, as it last told one of its processes (link.STATE): the newest telling wins."""

    id: str
    host: str
    pid: int
    started_at: str  # ISO 8601, as the supervisor wrote it
    processes: int  # processes it keeps running
    started: int  # processes it has started
    restarts: int  # unplanned exits (crashes, stuck lanes)
    recycled: int  # processes replaced for --max-jobs, --max-memory or a reload
    last_exit: str | None  # "<worker> killed by SIGKILL after 3.2s (crash)"

    @classmethod
    def of(cls, state: Any) -> SupervisorFigures | None:
        """From a worker record's JSON; None when it is not a supervisor's state (a forged one too)."""
        try:
            if isinstance(state, str):
                state = json.loads(state)
            if not isinstance(state, dict) or not isinstance(state.get("id"), str):
                return None
            keys = ("pid", "processes", "started", "restarts", "recycled")
            number = {key: int(state.get(key) or 0) for key in keys}
        except (ValueError, TypeError):
            return None
        return cls(
            id=state["id"], host=str(state.get("host") or ""), pid=number["pid"],
            started_at=str(state.get("started_at") or ""), processes=number["processes"],
            started=number["started"], restarts=number["restarts"], recycled=number["recycled"],
            last_exit=None if state.get("last_exit") is None else str(state["last_exit"]),
        )  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerFigures:
    """One worker process as its last heartbeat described it."""

    worker_id: str
    hostname: str
    pid: int
    lanes: dict[str, int]  # queue -> slots
    stuck: dict[str, int]  # queue -> slots stuck in a job past its timeout (absent: none)
    running: int
    started_at: dt.datetime
    last_seen_at: dt.datetime
    stopped_at: dt.datetime | None
    silent_for: float  # seconds since the last heartbeat
    # "alive", "stuck" (alive, but every slot of a lane is stuck past a timeout), "silent" (no heartbeat
    # for ALIVE_HEARTBEATS intervals) or "stopped"
    state: str
    supervisor: SupervisorFigures | None = None  # the supervisor that started it, if any


def worker_figures(connection: BaseDatabaseWrapper) -> tuple[WorkerFigures, ...]:
    """The workers seen in the last WORKERS_RECENT_SECONDS, most recently seen first (WORKERS)."""
    alive_for = ALIVE_HEARTBEATS * jobq_settings().heartbeat_seconds
    workers = []
    engine = engine_of(connection)
    time = engine.text_time
    now = timezone.now() if jobq_settings().clock == "python" else None
    params = {"now": now, "recent": WORKERS_RECENT_SECONDS, "limit": WORKERS_LIMIT}
    rows = engine.run(connection, engine.stats.WORKERS, params).rows
    for worker_id, host, pid, lanes, running, stuck, started, seen, stopped, supervisor, silent_for in rows:
        lanes = json.loads(lanes) if isinstance(lanes, str) else lanes
        stuck = json.loads(stuck) if isinstance(stuck, str) else stuck or {}
        state = "stopped" if stopped is not None else "alive" if silent_for <= alive_for else "silent"
        if state == "alive" and any(n >= lanes.get(queue, n + 1) for queue, n in stuck.items()):
            state = "stuck"
        workers.append(
            WorkerFigures(
                worker_id=worker_id, hostname=host, pid=pid, lanes=lanes, stuck=stuck, running=running,
                started_at=time(started),  # type: ignore[arg-type]
                last_seen_at=time(seen),  # type: ignore[arg-type]
                stopped_at=time(stopped), silent_for=silent_for, state=state,
                supervisor=SupervisorFigures.of(supervisor),
            )
        )  # fmt: skip
    return tuple(workers)


def supervisors(workers: tuple[WorkerFigures, ...]) -> dict[str, SupervisorFigures]:
    """The supervisors of ``workers`` by id, each as its most recently started process recorded it
    (the figures a supervisor sent last)."""
    found: dict[str, tuple[dt.datetime, SupervisorFigures]] = {}
    for worker in workers:
        s = worker.supervisor
        if s is not None and (s.id not in found or found[s.id][0] < worker.started_at):
            found[s.id] = (worker.started_at, s)
    return {key: figures for key, (_, figures) in sorted(found.items())}
