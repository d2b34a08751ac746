"""Capped queues (JOBQ["QUEUES"][q]["MAX_RUNNING"]): a slot starts a job of a capped queue only in a
seat of that queue the worker holds, and a queue has as many seats as its cap (managers/seats.py), so
no more of its jobs run at once across every worker than its cap.

A lane takes seats before it claims, up to the cap or its slots, whichever is fewer, and claims against
them without the cap's lock or count:
- a lane claims ahead of its seats as it does of its slots (a job claimed ahead holds no seat: it
  waits in the lane, leased, until a slot starts it in a free seat), so a slot never waits for a round
  trip between two jobs;
- in a lane of the capped queue alone (``--queues reports:4``) a slot that takes a job while every
  seat is in use waits for one; in the "*" lane, whose slots serve other queues too, it parks the job
  and goes on, and the slot whose job of that queue ends next runs the parked job in its seat.
A claim that found fewer of a queue's jobs than it could take, while none of them runs or waits in the
lane, frees the lane's seats of that queue, so an idle worker holds none; the lane takes seats again at
a wake-up for the queue or the poll interval.

A seat is leased as a job is: the heartbeat renews it, a slot starts no job in a seat whose last
renewal was sent more than a lease less a heartbeat ago, and a worker that dies or is cut off loses its
seats when their leases run out, to whichever worker takes them next. A stopping worker frees all of
its seats. A batch's further jobs each take a free seat too (the cap counts jobs, not runs)."""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import Error as DatabaseError
from django.db import connections

from ..conf import jobq_settings
from ..models import Job
from .base import WorkerBase, is_connection_error
from .lanes import Lane, Running

if TYPE_CHECKING:
    from ..managers.seats import Seat

logger = logging.getLogger("django_jobq")


class Sat(enum.Enum):
    """What a slot may do with a job it took (SeatMixin._sit)."""

    FREE = "not a capped queue's job: start it"
    SEATED = "start it in the seat taken"
    PARKED = "every seat in use: the job waits for one, the slot goes on"
    REFUSED = "give it back unstarted"


@dataclass(eq=False)
class SeatPool:
    """The seats one lane holds for one capped queue, guarded by the lane's cond."""

    queue: str
    cap: int
    # seat number -> (fence, monotonic time at which its last take or renewal was sent)
    held: dict[int, tuple[int, float]] = field(default_factory=dict)
    in_use: int = 0  # the queue's jobs running in the lane's slots, one per seat
    waiting: int = 0  # the queue's jobs handed to the lane and not yet taken by a slot
    # the "*" lane: jobs a slot took while every seat was in use, each run next by a slot whose job of
    # the queue ends (so no slot of the lane ever waits for a seat)
    parked: deque[Running] = field(default_factory=deque)
    take_at: float = 0.0  # monotonic time before which the lane does not try to take seats again

    def usable(self, now: float) -> int:
        """Seats a job may start in: those renewed within a lease less a heartbeat."""
        conf = jobq_settings()
        margin = conf.lease_seconds - conf.heartbeat_seconds
        return sum(1 for _, sent in self.held.values() if now - sent < margin)

    def free(self, now: float) -> int:
        return self.usable(now) - self.in_use

    def named(self) -> list[Seat]:
        return [(self.queue, seat, fence) for seat, (fence, _) in sorted(self.held.items())]


class SeatMixin(WorkerBase):
    _took_seats: bool  # some lane took seats once: a stopping worker frees them

    def _seat_pools(self, lane: Lane) -> dict[str, SeatPool]:
        """The lane's pools, one per capped queue it claims from (made as the caps are read)."""
        caps = jobq_settings().caps()
        serves = [lane.claims] if lane.claims is not None else [q for q in caps if q not in lane.exclude]
        with lane.cond:
            for queue in serves:
                cap = caps.get(queue)
                if cap is not None and (pool := lane.seats.get(queue)) is None:
                    lane.seats[queue] = SeatPool(queue, cap)
                elif cap is not None and pool is not None:
                    pool.cap = cap
            return dict(lane.seats)

    def _take_seats(self, lane: Lane) -> None:
        """Before a claim: take the seats the lane lacks, up to the cap or its slots, of each capped
        queue not held (paused) and not waiting out a take that found none."""
        held = set(lane.held)
        for queue, pool in sorted(self._seat_pools(lane).items()):
            with lane.cond:
                want = min(pool.cap, lane.slots) - len(pool.held)
                if want <= 0 or time.monotonic() < pool.take_at or queue in held:
                    continue
            if self._take(lane, pool, want) < want:  # the others are held elsewhere
                with lane.cond:  # try again at the poll or a wake-up for the queue
                    pool.take_at = time.monotonic() + self.poll_interval

    def _take(self, lane: Lane, pool: SeatPool, want: int) -> int:
        """Take up to ``want`` more seats into ``pool``; how many. Without the database none: the
        queue's jobs wait."""
        sent = time.monotonic()
        try:
            Job.objects.bound_statements()
            taken = Job.objects.take_seats(self.worker_id, pool.queue, pool.cap, want)
        except DatabaseError as exc:
            taken = []
            if is_connection_error(exc):  # logged once per outage, with the worker's other statements
                connections[jobq_settings().database].close()
                self.outage.failed(f"lane {lane.queue}'s seat take", exc)
            else:
                logger.warning("worker %s: could not take seats of capped queue %s (%s)", self.worker_id,
                               pool.queue, exc)  # fmt: skip
        self._took_seats = True
        with lane.cond:
            for seat, fence in taken:
                pool.held[seat] = (fence, sent)
            lane.cond.notify_all()  # a slot waiting for a seat
            self._rehome(lane, pool)
        return len(taken)

    def _seats_due(self, lane: Lane, now: float) -> bool:
        """A capped queue's own lane may take more seats now (and then claim). Holds lane.cond."""
        pool = lane.own_seats
        return pool is not None and now >= pool.take_at and len(pool.held) < min(pool.cap, lane.slots)

    def _next_seat_take(self, lane: Lane, now: float) -> float | None:
        """When a capped queue's own lane, waiting out a take that found no seat, tries again (None:
        it does not wait to; a due take is _seats_due's). Holds lane.cond."""
        pool = lane.own_seats
        return pool.take_at if pool is not None and pool.take_at > now else None

    def _seated(self, lane: Lane) -> dict[str, int]:
        """The capped queues the "*" lane claims from, each with the jobs its seats leave room for: a
        job per usable seat, and while the lane's runs are short as many ahead per seat as the lane
        claims ahead per slot, less the queue's jobs running, waiting and parked. A queue's own lane
        claims by its capacity (Lane.capacity: no more slots than its usable seats) and is listed
        alone."""
        held = set(lane.held)  # paused: not claimed
        if lane.claims is not None:
            return {lane.claims: 1 << 30} if lane.claims in lane.seats and lane.claims not in held else {}
        now = time.monotonic()
        claim_ahead = jobq_settings().claim_ahead
        with lane.cond:
            per_seat = 1 + (lane.ahead(claim_ahead) if lane.short() else 0)
            return {
                q: max(0, pool.usable(now) * per_seat - pool.in_use - pool.waiting - len(pool.parked))
                for q, pool in lane.seats.items()
                if q not in held
            }

    def _free_idle_seats(self, lane: Lane, seated: dict[str, int], jobs: list[Job], asked: int) -> None:
        """After a claim: a capped queue that gave fewer jobs than the claim could take has no more
        due; once none of its jobs runs or waits in the lane, its seats are freed for other workers,
        and the lane takes none again before the poll interval or a wake-up for the queue."""
        if not lane.seats:
            return
        got = Counter(job.queue for job in jobs)
        short = len(jobs) < asked  # so no queue's part of the claim was cut by the claim's limit
        freed: list[Seat] = []
        now = time.monotonic()
        with lane.cond:
            for queue, pool in lane.seats.items():
                if not pool.held or pool.in_use or pool.waiting or pool.parked:
                    continue
                if queue in seated:  # not paused: idle when the claim found fewer than it could take
                    could = asked if lane.claims is not None else seated[queue]
                    if not short or could <= 0 or got[queue] >= could:
                        continue
                freed += pool.named()
                pool.held.clear()
                pool.take_at = now + self.poll_interval
        if freed:
            try:
                Job.objects.release_seats(self.worker_id, freed)
            except DatabaseError as exc:  # they come free when their leases run out
                logger.warning("worker %s: could not free seats %s (%s)", self.worker_id, freed, exc)

    def _seat_woken(self, lane: Lane, queue: str | None) -> None:
        """A wake-up for ``queue`` (None: any): the lane may take its seats at once. Holds lane.cond."""
        for name, pool in lane.seats.items():
            if queue is None or name == queue:
                pool.take_at = 0.0

    def _handed_seated(self, lane: Lane, entries: Iterable[Running]) -> None:
        """Claimed jobs of capped queues enter the lane: each waits for a slot, then for a seat."""
        if not lane.seats:
            return
        with lane.cond:
            for entry in entries:
                if (pool := lane.seats.get(entry.job.queue)) is not None:
                    pool.waiting += 1

    def _left_waiting(self, lane: Lane, entries: Iterable[Running]) -> None:
        """Jobs taken off the lane's queue unstarted (given back)."""
        if not lane.seats:
            return
        with lane.cond:
            for entry in entries:
                if (pool := lane.seats.get(entry.job.queue)) is not None:
                    pool.waiting -= 1

    def _sit(self, lane: Lane, entry: Running) -> Sat:
        """A slot took ``entry`` off the lane's queue: may it start it? A capped queue's job needs a
        free seat: a queue's own lane waits for one while it holds a usable seat; the "*" lane parks the
        job when every seat is in use (a slot whose job of the queue ends runs it next). REFUSED (give it
        back) when stopping, or when no seat is usable (renewals stopped reaching the database)."""
        pool = lane.seats.get(entry.job.queue)
        if pool is None:
            return Sat.FREE
        with lane.cond:
            sat = Sat.REFUSED
            while not self.stopping.is_set() and not entry.lost:  # counted waiting meanwhile: its
                now = time.monotonic()  # seats stay held (_free_idle_seats)
                if pool.free(now) > 0:
                    pool.in_use += 1
                    sat = Sat.SEATED
                    break
                if not pool.usable(now):
                    break
                if lane.claims is None:
                    pool.parked.append(entry)
                    sat = Sat.PARKED
                    break
                lane.cond.wait(timeout=0.25)
            pool.waiting -= 1
            if sat is Sat.REFUSED:  # a seat this job was handed may be free for a parked one
                self._rehome(lane, pool)
            return sat

    def _stand(self, lane: Lane, queue: str, n: int = 1, *, hand_off: bool = False) -> Running | None:
        """``n`` jobs of ``queue`` ended in the lane's slots: their seats are free for the parked jobs
        (_rehome); with ``hand_off``, the first of those is returned for the calling slot to run next."""
        with lane.cond:
            pool = lane.seats.get(queue)
            if pool is None:
                return None
            pool.in_use -= n
            lane.cond.notify_all()
            return self._rehome(lane, pool, hand_off=hand_off)

    def _rehome(self, lane: Lane, pool: SeatPool, *, hand_off: bool = False) -> Running | None:
        """Parked jobs as many seats are free: the first returned when ``hand_off`` (the calling slot
        runs it next, in the seat it just freed, unless another slot takes that seat first: then it is
        parked again), the others back on the lane's queue for any slot. With no usable seat left, all
        of them go back (unstarted); none move while stopping (the dispatcher gives them back). Holds
        lane.cond."""
        if not pool.parked or self.stopping.is_set():
            return None
        now = time.monotonic()
        if not pool.usable(now):
            lane.unstarted += pool.parked
            pool.parked.clear()
            lane.cond.notify_all()
            return None
        moved = [pool.parked.popleft() for _ in range(min(len(pool.parked), max(0, pool.free(now))))]
        pool.waiting += len(moved)  # back in the lane's hands: _sit counts each out again
        first = moved.pop(0) if hand_off and moved else None
        for entry in moved:
            lane.work.put(entry)
        return first

    def _unpark(self, lane: Lane, everything: bool) -> list[Running]:
        """Parked jobs to give back: all of them when ``everything`` (stopping), else those of pools
        whose seats are no longer usable or whose runs are no longer short (parked jobs would wait behind
        them)."""
        out: list[Running] = []
        if not lane.seats:
            return out
        now = time.monotonic()
        with lane.cond:
            long_runs = lane.run_seconds is not None and not lane.short()
            for pool in lane.seats.values():
                if pool.parked and (everything or long_runs or not pool.usable(now)):
                    out += pool.parked
                    pool.parked.clear()
        return out

    def _sit_more(self, lane: Lane, queue: str, most: int) -> int:
        """A batch's further jobs: seats for up to ``most`` of them, taken now, without waiting (more
        seats than the lane's slots when free: a batch's jobs run in one slot); how many."""
        pool = lane.seats[queue]
        with lane.cond:
            short = min(most - pool.free(time.monotonic()), pool.cap - len(pool.held))
        if short > 0:
            self._take(lane, pool, short)
        with lane.cond:
            n = max(0, min(most, pool.free(time.monotonic())))
            pool.in_use += n
            return n

    @staticmethod
    def _seat_wanted(lane: Lane, queue: str) -> bool:
        """A job of ``queue`` waits in the lane for a seat (a retry waiting in its slot gives its seat
        up for it). Holds lane.cond."""
        pool = lane.seats.get(queue)
        return pool is not None and (pool.waiting > 0 or bool(pool.parked))

    def _seats_fresh(self, lane: Lane, queue: str) -> bool:
        """Every seat the lane holds for ``queue`` is still usable (True for an uncapped queue): a batch
        that filled for a while starts only then."""
        with lane.cond:
            pool = lane.seats.get(queue)
            return pool is None or pool.usable(time.monotonic()) == len(pool.held)

    def _renew_seats(self, lease: float) -> None:
        """The heartbeat: renew every seat the worker holds in one statement; a seat found lost is
        dropped (its queue's jobs wait for another)."""
        pools = [(lane, pool) for lane in self.lanes.values() for pool in list(lane.seats.values())]
        named: list[Seat] = []
        for lane, pool in pools:
            with lane.cond:
                named += pool.named()
        if not named:
            return
        sent = time.monotonic()
        kept = Job.objects.renew_seats(self.worker_id, named, lease)
        lost = []
        for lane, pool in pools:
            with lane.cond:
                for seat, (fence, _) in list(pool.held.items()):
                    if (pool.queue, seat, fence) not in named:
                        continue  # taken after the renewal was read
                    if (pool.queue, seat) in kept:
                        pool.held[seat] = (fence, sent)
                    else:
                        del pool.held[seat]
                        lost.append(f"{pool.queue}#{seat}")
                lane.cond.notify_all()
        if lost:
            logger.warning("worker %s lost seat(s) %s of capped queues (leases ran out); their jobs wait for "
                           "others", self.worker_id, lost)  # fmt: skip

    def _free_all_seats(self) -> None:
        """A stopping worker frees every seat it holds."""
        if not self._took_seats:
            return
        for lane in self.lanes.values():
            with lane.cond:
                for pool in lane.seats.values():
                    pool.held.clear()
        self._db(lambda: Job.objects.release_seats(self.worker_id), attempts=3)
