"""The dashboard's figures as plain text, for ``manage.py jobq_stats`` and the admin's labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .workers import WORKERS_RECENT_SECONDS, SupervisorFigures, supervisors

if TYPE_CHECKING:
    from . import QueueFigures, Snapshot

# The upkeep line's warning when autovacuum never reaches jobq_job.
AUTOVACUUM_OFF = "AUTOVACUUM OFF: nothing removes its dead rows but a manual VACUUM"
# Another transaction open this long is named on the upkeep line: no vacuum removes what died since.
OLD_XACT_SECONDS = 60.0


def format_table(snap: Snapshot) -> str:
    """The snapshot as plain text: one line per queue, a total line, then the workers."""
    approx = "~" if snap.done_estimated else ""
    header = (
        "queue", "pending", "due", "lag", "running", "expired", "waiting", "dead", "done", "done 5m",
        "done 60m", "dead 5m", "dead 60m", "cancelled 60m",
    )  # fmt: skip
    lines = [header]
    for q in (*snap.queues, snap.total):
        done = "?" if q.done is None else f"{approx}{q.done}"
        name = (q.queue + " (paused)" if q.paused else q.queue) or "(all)"
        lines.append(
            (
                name, _of(q.pending, q.max_depth), str(q.due), format_duration(q.lag), _running(q),
                str(q.expired), str(q.waiting),
                str(q.dead), done, str(q.done_5m), str(q.done_60m), str(q.dead_5m), str(q.dead_60m),
                str(q.cancelled_60m),
            )
        )  # fmt: skip
    out = [f"django-jobq at {snap.now.isoformat(timespec='seconds')}", *_columns(lines)]
    if snap.replica is not None:
        behind = "an unknown time" if snap.replica.seconds is None else format_duration(snap.replica.seconds)
        out.append(f"read from the standby {snap.replica.alias!r}, {behind} behind its primary")
    if snap.done_estimated:
        out.append("~ DONE counts are planner estimates (jobq_stats --exact counts them)")
    if snap.unserved:
        out.append(f"! due jobs and no live worker serving: {', '.join(snap.unserved)}")
    for p in snap.paused:
        out.append(f"paused: {p.queue} since {p.since.isoformat(timespec='seconds')} by {p.by or '?'}")
    for q in snap.queues:
        if q.rate_limit:
            out.append(f"rate limit: queue {q.queue} starts at most {q.rate_limit}")
    if snap.tasks:
        out.append("")
        limits = [("task", "queue", "running", "max running", "per key", "rate limit")]
        for t in snap.tasks:
            limits.append((
                t.task, t.queue, _seated(t.running, t.seats, t.max_running), _or_dash(t.max_running),
                _or_dash(t.max_running_per_key),
                t.rate_limit or "-",
            ))  # fmt: skip
        out += _columns(limits)
    if snap.fair:
        out.append("")
        keys = [("fair queue", "key", "due", "oldest wait")]
        for k in snap.fair:
            keys.append(
                (
                    k.queue,
                    k.key or "(no key)",
                    f"{k.due}+" if k.partial else str(k.due),
                    format_duration(k.wait),
                )
            )
        out += _columns(keys)
    if snap.table is not None:
        out.append(format_upkeep(snap))
    out.append("")
    if snap.workers:
        rows = [("worker", "state", "host", "pid", "lanes", "running", "last seen")]
        # a supervisor's processes together (their ids start with its id), after the others
        for w in sorted(snap.workers, key=lambda w: "" if w.supervisor is None else w.supervisor.id):
            lanes = ",".join(
                f"{queue}:{slots}" + (f"({w.stuck[queue]} stuck)" if w.stuck.get(queue) else "")
                for queue, slots in sorted(w.lanes.items())
            )
            seen = f"{format_seconds(w.silent_for)} ago"
            rows.append((w.worker_id, w.state, w.hostname, str(w.pid), lanes, str(w.running), seen))
        out += _columns(rows)
        out += [format_supervisor(s) for s in supervisors(snap.workers).values()]
    else:
        out.append(f"no worker seen in the last {WORKERS_RECENT_SECONDS // 60} minutes")
    return "\n".join(out)


def format_supervisor(s: SupervisorFigures) -> str:
    """One line per supervisor (jobq_worker --processes) of the listed workers."""
    line = (
        f"supervisor {s.id}: pid {s.pid} on {s.host}, since {s.started_at}; {s.processes} process(es), "
        f"{s.started} started, {s.restarts} unplanned exit(s), {s.recycled} recycled"
    )
    return line + (f"; last exit: {s.last_exit}" if s.last_exit else "")


def format_upkeep(snap: Snapshot) -> str:
    """jobq_job's size, dead rows and last vacuum on one line."""
    t = snap.table
    assert t is not None
    vacuumed = (
        "never"
        if t.vacuumed_at is None
        else f"{format_seconds((snap.now - t.vacuumed_at).total_seconds())} ago"
    )
    return (
        (
            f"table jobq_job: {format_bytes(t.table_bytes)} (indexes {format_bytes(t.index_bytes)}), "
            f"~{t.live_rows} live rows, {t.dead_rows} dead ({t.dead_share:.0%}), last vacuum {vacuumed}"
        )
        + ("" if t.autovacuum else f"; {AUTOVACUUM_OFF}")
        + _holding_back(t.oldest_xact_seconds)
    )


def _holding_back(seconds: float | None) -> str:
    """The upkeep line's note of a transaction open long enough to matter (OLD_XACT_SECONDS)."""
    if seconds is None or seconds < OLD_XACT_SECONDS:
        return ""
    return f"; a transaction open {format_seconds(seconds)} holds back vacuum"


def format_bytes(size: int) -> str:
    """A size: "812 B", "64.0 KiB", "84.2 MiB", "1.3 GiB"."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _running(q: QueueFigures) -> str:
    return _seated(q.running, q.seats, q.max_running)


def _seated(running: int, seats: int | None, cap: int | None) -> str:
    """RUNNING jobs, and a capped queue's or task's seats held of its seats: "12 (4/4 seats)"; its cap
    alone, "12 (cap 4)", where its seats are on another database."""
    if cap is None:
        return str(running)
    return f"{running} (cap {cap})" if seats is None else f"{running} ({seats}/{cap} seats)"


def _of(figure: int, limit: int | None) -> str:
    """A figure against its limit: "12/1000"."""
    return str(figure) if limit is None else f"{figure}/{limit}"


def format_seconds(seconds: float | None) -> str:
    """A short duration: "-", "42s", "7m05s", "3h12m", "2d04h"."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_duration(seconds: float | None) -> str:
    """How long something took or has waited, to the millisecond below a second and the tenth below
    ten: "-", "12ms", "4.2s", then as format_seconds ("42s", "7m05s"), so a short run never reads "0s"."""
    if seconds is None:
        return "-"
    if (ms := round(max(0.0, seconds) * 1000)) < 1000:
        return f"{ms}ms"
    if (tenths := round(seconds, 1)) < 10:
        return f"{tenths:.1f}s"
    return format_seconds(seconds)


# -- helpers ---------------------------------------------------------------------------------------------


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
