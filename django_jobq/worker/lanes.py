"""Lanes (a queue with its own pool of slots) and the worker's record of each job it runs."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import TYPE_CHECKING

from .. import validation
from ..context import CancelSignal
from ..exceptions import ConfigurationError, InvalidJob
from ..shards import databases_of_queue, every_database

if TYPE_CHECKING:
    from ..models import Job
    from .classify import Outcome
    from .seat_pools import SeatPool


ALL_QUEUES = "*"  # a lane serving every queue that no other lane of the worker serves
SHORT_RUN_SECONDS = 0.05  # a lane claims ahead while its recent runs average less than this


def lanes_by_database(lanes: dict[str, int]) -> dict[str, dict[str, int]]:
    """``lanes`` split by the databases that hold each named queue (a spread queue's lane on each of
    its databases, with its slots on each); a ``*`` lane on every database (its named queues
    excluded there as everywhere)."""
    found: dict[str, dict[str, int]] = {}
    for name, slots in lanes.items():
        for alias in every_database() if name == ALL_QUEUES else databases_of_queue(name):
            found.setdefault(alias, {})[name] = slots
    return found


def check_lanes(lanes: dict[str, int], alias: str) -> None:
    """ConfigurationError for a named lane whose queue is on another database than ``alias`` (a
    worker there would never find its jobs)."""
    for name in lanes:
        if name != ALL_QUEUES and alias not in (held := databases_of_queue(name)):
            raise ConfigurationError(
                f"queue {name!r} is on database(s) {', '.join(held)}, not {alias!r}: run its lane on "
                "a worker of its database"
            )


def parse_lanes(spec: str, default_slots: int) -> dict[str, int]:
    """'interactive:8,agents:2' -> {'interactive': 8, 'agents': 2}; a bare name gets default_slots;
    '*' is the lane for every other queue."""
    lanes: dict[str, int] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, _, slots = part.partition(":")
        if name in lanes:
            raise ConfigurationError(f"queue {name!r} is listed twice in {spec!r}")
        try:
            lanes[validation.name(name, "queue")] = int(slots) if slots else default_slots
        except (ValueError, InvalidJob) as exc:
            raise ConfigurationError(f"bad lane {part!r}: expected QUEUE or QUEUE:SLOTS ({exc})") from None
    if not lanes or min(lanes.values()) < 1:
        raise ConfigurationError(f"bad --queues {spec!r}: need at least one queue, each with >= 1 slot")
    return lanes


def _moving_average(average: float | None, value: float) -> float:
    """``value`` folded into ``average`` (None: no value yet), recent values weighing most."""
    return value if average is None else 0.8 * average + 0.2 * value


@dataclass(eq=False)
class Running:
    """One run of a job in this worker: the job as claimed and the run's fencing token. An in-slot
    retry starts a new run (a new Running with a new fence); entries are keyed by (job id, fence)."""

    job: Job
    fence: int
    attempt: int
    lane: Lane
    timeout: float | None  # seconds the run may take once started (None: no limit)
    deadline: float | None = None  # set when a slot starts it: after this, the watchdog fails the job
    timed_out: bool = False
    writing: bool = False  # its outcome is being written: the row may leave RUNNING at any moment
    # monotonic time at which the statement that last set its lease (the claim, then each heartbeat)
    # was sent: the lease runs at least LEASE_SECONDS from then, never longer than that is known
    renewed_at: float = 0.0
    lost: bool = False  # a heartbeat found the job no longer ours: never start it
    permitted: bool = False  # claimed with a permit of its queue's rate limit (worker/rationing.py)
    task_permitted: bool = False  # claimed with a permit of its task's rate limit (worker/rationing.py)
    cancel: CancelSignal = field(default_factory=CancelSignal)  # set when a heartbeat finds a cancel asked
    # the lane's pools of the caps it runs under (worker/seats.py), fixed as it is handed to the lane
    seat_pools: list[SeatPool] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, int]:
        return (self.job.id, self.fence)


@dataclass(eq=False)
class Lane:
    """One queue served by its own pool of slots, so a saturated lane never starves another.
    ``cond`` guards busy (jobs handed out and not yet finished, claimed-ahead ones included), outcomes,
    idle, woken, run_seconds, cycle_seconds, started, unstarted and give_back_at; the worker's lock guards ``current``; ``held`` is
    written by the lane's dispatcher only."""

    queue: str  # or ALL_QUEUES
    slots: int
    exclude: tuple[str, ...] = ()  # for the ALL_QUEUES lane: the queues the worker's other lanes serve
    busy: int = 0  # slots running a job
    outcomes: list[tuple[Running, Outcome]] = field(default_factory=list)  # finished, not yet written
    idle: bool = False  # the last claim found less than it asked for: wait for a wake-up or the poll
    woken: bool = False  # a notification arrived
    held: tuple[str, ...] = ()  # the paused queues its last cycle left out (a named lane: its own)
    work: SimpleQueue[Running | None] = field(default_factory=SimpleQueue)
    cond: threading.Condition = field(default_factory=threading.Condition)
    done: threading.Event = field(default_factory=threading.Event)
    current: dict[int, Running] = field(default_factory=dict)  # slot number -> the run it is in
    stuck_since: float | None = None  # monotonic time since when every slot is stuck past a timeout
    run_seconds: float | None = None  # moving average of its runs' durations (None: none yet)
    cycle_seconds: float | None = None  # moving average of its dispatcher's write-and-claim statements
    # claimed ahead and never started, set aside by a slot (stopping, or the lease may have run out)
    unstarted: list[Running] = field(default_factory=list)
    started: dict[int, float] = field(default_factory=dict)  # slot number -> monotonic start of its run
    give_back_at: float = 0.0  # monotonic time before which unstarted ones are not offered again
    look_past_at: float = 0.0  # monotonic time before which a claim does not look past held-back jobs
    replan_check_at: float = 0.0  # monotonic time of the lane's next look at the table's growth
    claimed_after: int = 0  # the worker's ended-jobs count as this lane's last claim was sent
    # rate-limited queues (worker/rationing.py), written by the dispatcher only: monotonic time at which
    # the bucket of a queue whose permits ran out has one again (the lane waits for it, not for the
    # poll); and time before which a queue whose claim found fewer due jobs than permits is not asked
    # for permits again (a wake-up clears it)
    permit_at: dict[str, float] = field(default_factory=dict)
    dry: dict[str, float] = field(default_factory=dict)
    # rate-limited tasks whose jobs the lane claims with permits taken first, each with the permits of
    # this cycle's claim (0: none, its jobs left out; a task just found in a claim waits for the next
    # one); and the time at which the bucket of a task whose permits ran out has one again
    task_rations: dict[str, int] = field(default_factory=dict)
    task_permit_at: dict[str, float] = field(default_factory=dict)
    # capped queues (worker/seats.py): the seats the lane holds, per queue (a capped queue's own lane:
    # its queue's alone, and it uses no more slots at once than it holds seats)
    seats: dict[str, SeatPool] = field(default_factory=dict)

    def short(self) -> bool:
        return self.run_seconds is not None and self.run_seconds < SHORT_RUN_SECONDS

    @property
    def own_seats(self) -> SeatPool | None:
        """A capped queue's own lane: its queue's seats (None: any other lane)."""
        return self.seats.get(self.queue) if self.claims is not None else None

    def usable_slots(self, now: float) -> int:
        """Its slots, or, in a capped queue's own lane, as many as it holds usable seats for."""
        pool = self.own_seats
        return self.slots if pool is None else min(self.slots, pool.usable(now))

    def _short_slots(self, now: float) -> int:
        """Usable slots not inside a run that has already lasted past the short-run threshold."""
        long = sum(1 for began in self.started.values() if now - began >= SHORT_RUN_SECONDS)
        return max(0, self.usable_slots(now) - long)

    def ahead(self, claim_ahead: int) -> int:
        """Jobs a short slot may hold ahead: ``claim_ahead`` at most, and no more than it runs during
        two of the dispatcher's cycles (at least one). That is what keeps a slot from waiting for the
        next claim (a run that ends just after a cycle was sent is written, and replaced, by the cycle
        after it), so a job claimed ahead waits about two cycles, never ``claim_ahead`` runs of
        several milliseconds each. Holds cond."""
        if not self.cycle_seconds or not self.run_seconds:
            return claim_ahead
        return min(claim_ahead, max(1, math.ceil(2 * self.cycle_seconds / self.run_seconds)))

    def capacity(self, claim_ahead: int, now: float) -> int:
        """Jobs the lane may hold at once: one per slot, plus ``ahead`` per slot while its runs are
        short, so that a slot finds its next job waiting instead of waiting for the next claim.
        A slot whose current run has outlasted the threshold earns no job ahead: nothing waits behind
        a long run. The heartbeat renews a claimed-ahead job's lease meanwhile, and a stopping worker
        gives it back at once. Holds cond."""
        if not self.short():
            return self.usable_slots(now)
        return self.usable_slots(now) + self.ahead(claim_ahead) * self._short_slots(now)

    def surplus(self, claim_ahead: int, now: float) -> int:
        """Claimed-ahead jobs waiting beyond what the lane may keep (its free slots, and ``claim_ahead``
        per slot in a short run): they go back to PENDING at once for any worker. ``claim_ahead``, not
        ``ahead``: a cycle slower than the last only stops claiming more, it gives nothing back. Holds
        cond."""
        free = max(0, self.usable_slots(now) - len(self.started))
        ahead = claim_ahead * self._short_slots(now) if self.short() else 0
        return max(0, self.work.qsize() - free - ahead)

    def next_long_run(self, now: float) -> float | None:
        """Seconds until a current run passes the short-run threshold (None: none will)."""
        left = [began + SHORT_RUN_SECONDS - now for began in self.started.values()]
        return min((t for t in left if t > 0), default=None)

    def next_permit(self) -> float | None:
        """When the first of the rate-limited queues and tasks whose permits ran out has one again
        (None: none waits for one)."""
        return min((*self.permit_at.values(), *self.task_permit_at.values()), default=None)

    def ran(self, seconds: float) -> None:
        """Fold one run's duration into the average. Holds cond."""
        self.run_seconds = _moving_average(self.run_seconds, seconds)

    def cycled(self, seconds: float) -> None:
        """Fold one write-and-claim statement's duration into the average. Holds cond."""
        self.cycle_seconds = _moving_average(self.cycle_seconds, seconds)

    @property
    def claims(self) -> str | None:
        """The queue this lane claims from; None for every queue but ``exclude``."""
        return None if self.queue == ALL_QUEUES else self.queue

    @property
    def paused(self) -> bool:
        """A named lane whose queue is paused: it claims nothing, and still writes what finishes."""
        return self.claims is not None and bool(self.held)

    def stuck(self) -> int:
        """Slots still inside a job function the watchdog has already timed out."""
        return sum(1 for entry in self.current.values() if entry.timed_out)
