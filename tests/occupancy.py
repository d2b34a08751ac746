"""How many job bodies ran at once, from the log test.occupy writes (tests/testapp/tasks.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import NamedTuple


class Note(NamedTuple):
    at: float  # CLOCK_MONOTONIC
    step: int  # +1: a body started; -1: it ended
    job_id: int
    worker_id: str


def notes(log: Path) -> list[Note]:
    """The log's lines in time order (at equal times an end before a start)."""
    rows = []
    for line in log.read_text().splitlines():
        at, step, job_id, worker_id = line.split()
        rows.append(Note(float(at), int(step), int(job_id), worker_id))
    return sorted(rows)


def unfinished(log: Path) -> Counter[tuple[int, str]]:
    """(job id, worker id) -> bodies that started and never wrote their end (their process died)."""
    open_bodies: Counter[tuple[int, str]] = Counter()
    for note in notes(log):
        open_bodies[note.job_id, note.worker_id] += note.step
    return +open_bodies


def peak(
    log: Path, killed: Mapping[str, float] | None = None, only: Collection[int] | None = None
) -> tuple[int, int]:
    """The most bodies running at the same moment, and how many bodies started (of the jobs ``only``
    names, if given). ``killed``: worker id -> CLOCK_MONOTONIC of its kill, when a body of it that never
    ended counts as ended (others count as running to the end)."""
    events = [(note.at, note.step) for note in notes(log) if only is None or note.job_id in only]
    for (job_id, worker), n in unfinished(log).items():
        if killed and worker in killed and (only is None or job_id in only):
            events.append((killed[worker], -n))
    running = most = 0
    for _, step in sorted(events):
        running += step
        most = max(most, running)
    return most, sum(1 for _, step in events if step > 0)
