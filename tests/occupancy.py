"""How many job bodies ran at once, from the log test.occupy writes (tests/testapp/tasks.py)."""

from __future__ import annotations

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


def peak(log: Path) -> tuple[int, int]:
    """The most bodies running at the same moment, and how many bodies started."""
    running = most = 0
    for note in notes(log):
        running += note.step
        most = max(most, running)
    return most, sum(1 for note in notes(log) if note.step > 0)
