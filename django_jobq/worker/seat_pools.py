"""The seats one lane holds for one cap (worker/seats.py): a capped queue's (JOBQ["QUEUES"][q]
["MAX_RUNNING"]) or a capped task's (@task(max_running=N)), and which of them a job needs."""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..conf import jobq_settings
from ..managers.seats import task_seats

if TYPE_CHECKING:
    from ..managers.seats import Seat
    from ..models import Job
    from .lanes import Lane, Running


class Sat(enum.Enum):
    """What a slot may do with a job it took (SeatMixin._sit)."""

    FREE = "no cap of the job's has seats: start it"
    SEATED = "start it in the seats taken"
    PARKED = "a seat it needs is in use: the job waits for one, the slot goes on"
    REFUSED = "give it back unstarted"


@dataclass(eq=False)
class SeatPool:
    """The seats one lane holds for one cap, guarded by the lane's cond."""

    name: str  # the capped queue's name, or task_seats(the capped task's)
    cap: int
    task: str | None = None  # a capped task's pool: its name
    # a capped task's pool: the task's own queue (Task.queue), where its jobs usually are, and whether
    # the lane serves it; a lane that does not takes the task's seats only after a claim that found too
    # little (probe), so a busy lane of other queues never holds them
    queue: str | None = None
    home: bool = True
    probe: bool = False
    # seat number -> (fence, monotonic time at which its last take or renewal was sent)
    held: dict[int, tuple[int, float]] = field(default_factory=dict)
    in_use: int = 0  # jobs running in the lane's slots in one of these seats each
    waiting: int = 0  # jobs needing one handed to the lane and not yet started (or parked elsewhere)
    # jobs a slot took while every seat was in use, each run next by a slot whose job in one of these
    # seats ends (so no slot waits for a seat, but those of a capped queue's own lane)
    parked: deque[Running] = field(default_factory=deque)
    take_at: float = 0.0  # monotonic time before which the lane does not try to take seats again
    spare_since: float | None = None  # monotonic time since which the lane holds more than it can use

    def usable(self, now: float) -> int:
        """Seats a job may start in: those renewed within a lease less a heartbeat."""
        conf = jobq_settings()
        margin = conf.lease_seconds - conf.heartbeat_seconds
        return sum(1 for _, sent in self.held.values() if now - sent < margin)

    def free(self, now: float) -> int:
        return self.usable(now) - self.in_use

    def idle(self) -> bool:
        return not (self.in_use or self.waiting or self.parked)

    def named(self) -> list[Seat]:
        return [(self.name, seat, fence) for seat, (fence, _) in sorted(self.held.items())]


def need(lane: Lane, pool: SeatPool) -> int:
    """The seats of ``pool`` the lane can use now: a capped queue's own lane, as many as its slots (all
    of them serve the queue); any other, those in use and one per slot not inside a run (a lane busy
    with other work needs none more). Holds lane.cond."""
    if pool is lane.own_seats:
        return min(pool.cap, lane.slots)
    return min(pool.cap, lane.slots, pool.in_use + max(0, lane.slots - len(lane.started)))


def let_go(pool: SeatPool, n: int, now: float) -> list[Seat]:
    """Drop ``n`` of the pool's seats, those no longer usable first, then the highest; the seats
    named, to free. Holds the lane's cond."""
    margin = jobq_settings().lease_seconds - jobq_settings().heartbeat_seconds
    order = sorted(pool.held.items(), key=lambda item: (now - item[1][1] < margin, -item[0]))
    dropped = [(pool.name, seat, fence) for seat, (fence, _) in order[:n]]
    for _, seat, _ in dropped:
        del pool.held[seat]
    return dropped


def pools_of(lane: Lane, job: Job) -> list[SeatPool]:
    """The lane's pools a job of ``job``'s queue and task needs a seat of each: its queue's, then its
    task's (none: it starts without a seat)."""
    if not lane.seats:
        return []
    queue, task = lane.seats.get(job.queue), lane.seats.get(task_seats(job.task))
    return [pool for pool in (queue, task if task is not queue else None) if pool is not None]
