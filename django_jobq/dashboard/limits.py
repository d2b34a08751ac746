"""The flow-control limits an operator sees beside the figures: each queue's rate limit, and every
registered task with a cap or a rate limit, with the jobs of it running now."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..managers.seats import task_seats
from ..registry import registered_tasks

if TYPE_CHECKING:
    from ..tasks import Task


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskLimits:
    """A registered task with a cap (max_running, max_running_per_key) or a rate limit."""

    task: str
    queue: str
    running: int  # its jobs RUNNING now (claimed ahead included), across every worker
    seats: int | None  # a task with max_running: its seats held now, its jobs that may run at once
    max_running: int | None
    max_running_per_key: int | None
    rate_limit: str | None  # "10/s", "3/10s"


def format_rate(rate: tuple[int, float] | None) -> str | None:
    """A rate limit as its setting spells it: (10, 1.0) "10/s", (100, 60.0) "100/m", (3, 10.0) "3/10s"."""
    if rate is None:
        return None
    count, seconds = rate
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and (seconds / size).is_integer():
            step = int(seconds / size)
            return f"{count}/{'' if step == 1 else step}{unit}"
    return f"{count}/{seconds:g}s"


def limited_tasks() -> list[tuple[str, Task[..., Any]]]:
    """The registered tasks with a cap or a rate limit, by name."""
    return [
        (name, task)
        for name, task in sorted(registered_tasks().items())
        if task.max_running is not None or task.max_running_per_key is not None or task.rate_limit is not None
    ]


def task_limits(
    tasks: list[tuple[str, Task[..., Any]]], running: dict[str, int], seats: dict[str, int] | None
) -> tuple[TaskLimits, ...]:
    """``tasks`` (limited_tasks()) with ``running``, the RUNNING jobs per task, and ``seats``, the
    seats held per name (SEATS_HELD; None: read on a database that holds no task's seats)."""
    return tuple(
        TaskLimits(
            task=name,
            queue=task.queue,
            running=running.get(name, 0),
            seats=None if task.max_running is None or seats is None else seats.get(task_seats(name), 0),
            max_running=task.max_running,
            max_running_per_key=task.max_running_per_key,
            rate_limit=format_rate(task.rate_limit),
        )
        for name, task in tasks
    )
