"""Caps in seats: capped queues (JOBQ["QUEUES"][q]["MAX_RUNNING"]) and capped tasks
(@task(max_running=N)). A slot starts a job only in a seat of each cap the job is under (its queue's,
its task's) that the worker holds, and a cap has as many seats as its number (managers/seats.py), so no
more of its jobs run at once across every worker than the cap.

A lane takes seats before it claims, up to the cap or its slots, whichever is fewer, and claims against
them without the cap's lock or count (a task's seats only while the lane has room to claim):
- a lane claims ahead of its seats as it does of its slots (a job claimed ahead holds no seat: it
  waits in the lane, leased, until a slot starts it in free seats), so a slot never waits for a round
  trip between two jobs;
- in a lane of a capped queue alone (``--queues reports:4``) a slot that takes a job while every seat
  of the queue is in use waits for one; otherwise (the "*" lane, whose slots serve other queues too, or
  a task's seats, whose jobs share lanes with other tasks) it parks the job and goes on, and the slot
  whose job in such a seat ends next runs the parked job.
A lane frees the seats of a cap none of whose jobs runs or waits in it: a queue's after a claim that
found fewer of its jobs than it could take; a task's likewise, or when the lane had no room to claim,
or once none of its jobs was in the lane for a poll interval; so an idle or busy-elsewhere worker holds
none. The lane takes seats again at a wake-up or the poll interval.

A seat is leased as a job is: the heartbeat renews it, a slot starts no job in a seat whose last
renewal was sent more than a lease less a heartbeat ago, and a worker that dies or is cut off loses its
seats when their leases run out, to whichever worker takes them next. A stopping worker frees all of
its seats. A batch's further jobs each take a free seat of their queue too (the cap counts jobs, not
runs; a batch task has no cap of its own).

A cap's seats may be on another database than the worker's (managers/seats.py, seats_database: the home
database holds a spread queue's and every task's): one that does not answer is no outage of the
worker's own database. The cap's jobs wait (no take, no start past the margin) while its other work
goes on, and it is logged once until it answers again."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable

from django.db import Error as DatabaseError
from django.db import connections

from ..conf import jobq_settings
from ..exceptions import SeatsUnavailable
from ..managers.seats import task_seats
from ..models import Job
from ..registry import capped_tasks
from ..shards import databases_of_queue
from ..sql import engine_for
from .base import is_connection_error
from .lanes import Lane, Running
from .seat_leases import SeatLeaseMixin
from .seat_pools import Sat, SeatPool, let_go, need, pools_of

logger = logging.getLogger("django_jobq")


class SeatMixin(SeatLeaseMixin):
    def _seat_pools(self, lane: Lane) -> dict[str, SeatPool]:
        """The lane's pools, one per capped queue it claims from and per capped task (made as the caps
        are read)."""
        conf = jobq_settings()
        caps = conf.caps()
        serves = (  # the "*" lane: the capped queues with jobs on this worker's database
            [lane.claims]
            if lane.claims is not None
            else [q for q in caps if q not in lane.exclude and conf.database in databases_of_queue(q)]
        )
        # name -> (cap, task, the task's queue): a queue named so runs in the task's seats
        wanted: dict[str, tuple[int, str | None, str | None]] = {q: (caps[q], None, None) for q in serves
                                                                  if q in caps}  # fmt: skip
        if engine_for(conf.database).capabilities.task_caps:
            for capped, task in capped_tasks().items():
                if task.max_running is not None:
                    wanted[task_seats(capped)] = (task.max_running, capped, task.queue)
        with lane.cond:
            for name, (cap, of_task, its_queue) in wanted.items():
                if (pool := lane.seats.get(name)) is not None:
                    pool.cap = cap
                    continue
                home = (  # a task's own queue, served by this lane on this database
                    its_queue is None
                    or its_queue == lane.claims
                    or (
                        lane.claims is None
                        and its_queue not in lane.exclude
                        and conf.database in databases_of_queue(its_queue)
                    )
                )
                lane.seats[name] = SeatPool(name, cap, of_task, its_queue, home)
            return dict(lane.seats)

    def _take_seats(self, lane: Lane) -> None:
        """Before a claim: take the seats the lane lacks of what it can use (seat_pools.need), of each
        capped queue not held (paused), then of each capped task (of one whose own queue the lane does
        not serve, only after a claim that found too little), but those waiting out a take that found
        none."""
        held = set(lane.held)
        wants: dict[str, tuple[SeatPool, int]] = {}
        with lane.cond:
            now = time.monotonic()
            for name, pool in self._seat_pools(lane).items():
                if (
                    now < pool.take_at
                    or (pool.task is None and name in held)
                    or not (pool.home or pool.probe)
                ):
                    continue
                if (want := need(lane, pool) - len(pool.held)) > 0:
                    wants[name] = (pool, want)
        if not wants:
            return
        taken = self._take(lane, wants)
        with lane.cond:  # those that found fewer (held elsewhere) try again at the poll or a wake-up
            for name, (pool, want) in wants.items():
                if taken.get(name, 0) < want:
                    pool.take_at = time.monotonic() + self.poll_interval

    def _take(self, lane: Lane, wants: dict[str, tuple[SeatPool, int]]) -> dict[str, int]:
        """Take up to so many more seats into each pool, in one statement; per name, how many. Without
        the database none: the caps' jobs wait."""
        sent = time.monotonic()
        try:
            Job.objects.bound_statements()
            caps = {name: (pool.cap, want) for name, (pool, want) in wants.items()}
            taken = Job.objects.take_seats_of(self.worker_id, caps)
        except SeatsUnavailable as exc:  # the other databases' seats are taken all the same
            taken = exc.partial
            self._seats_unanswered(exc)
            self._seats_answered(wants, exc.databases)
        except DatabaseError as exc:
            taken = {}
            if is_connection_error(exc):  # logged once per outage, with the worker's other statements
                connections[jobq_settings().database].close()
                self.outage.failed(f"lane {lane.queue}'s seat take", exc)
            else:
                logger.warning("worker %s: could not take seats of %s (%s)", self.worker_id, sorted(wants),
                               exc)  # fmt: skip
        else:
            self._seats_answered(wants)
        self._took_seats = True
        with lane.cond:
            for name, seats in taken.items():
                pool = wants[name][0]
                for seat, fence in seats:
                    pool.held[seat] = (fence, sent)
                self._rehome(lane, pool)
            lane.cond.notify_all()  # a slot waiting for a seat
        return {name: len(seats) for name, seats in taken.items()}

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
        """Per pool (by name), the jobs its seats leave room for in this claim: a job per usable seat,
        and while the lane's runs are short as many ahead per seat as the lane claims ahead per slot,
        less the cap's jobs running, waiting and parked. A capped queue's own lane claims its queue by
        its capacity (Lane.capacity: no more slots than its usable seats). Paused queues are left out."""
        held = set(lane.held)
        now = time.monotonic()
        claim_ahead = jobq_settings().claim_ahead
        with lane.cond:
            per_seat = 1 + (lane.ahead(claim_ahead) if lane.short() else 0)
            return {
                name: (
                    1 << 30
                    if pool is lane.own_seats
                    else max(0, pool.usable(now) * per_seat - pool.in_use - pool.waiting - len(pool.parked))
                )
                for name, pool in lane.seats.items()
                if pool.task is not None or name not in held
            }

    @staticmethod
    def _seated_caps(lane: Lane, seated: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
        """``seated`` as complete_and_claim takes it: the capped queues', and the capped tasks' (by
        task name)."""
        queues: dict[str, int] = {}
        tasks: dict[str, int] = {}
        for name, most in seated.items():
            task = lane.seats[name].task
            if task is None:
                queues[name] = most
            else:
                tasks[task] = most
        return queues, tasks

    def _free_spare_seats(self, lane: Lane, seated: dict[str, int], jobs: list[Job], asked: int) -> None:
        """After a claim, free the seats the lane has no use for: all of a cap's once none of its jobs
        runs or waits in the lane and the claim found fewer of them than it could take (or its queue is
        paused); and, but in a capped queue's own lane, those beyond what the lane can use
        (seat_pools.need) once it has held more than that for a poll interval (its slots busy with
        other work: those are announced, for a worker waiting for them). The lane takes none of them
        again before the poll interval or a wake-up."""
        if not lane.seats:
            return
        got = Counter(name for job in jobs for name in (job.queue, task_seats(job.task)))
        short = len(jobs) < asked  # so no queue's part of the claim was cut by the claim's limit
        dry_freed: list[tuple[str, int, int]] = []
        spare_freed: list[tuple[str, int, int]] = []
        now = time.monotonic()
        with lane.cond:
            for name, pool in lane.seats.items():
                pool.probe = short  # (a task's pool away from its queue: it may take seats next)
                if not pool.held:
                    pool.spare_since = None
                    continue
                could = (asked if pool is lane.own_seats else seated[name]) if name in seated else 0
                dry = name not in seated or (short and could > 0 and got[name] < could)
                if pool.idle() and dry:
                    dry_freed += let_go(pool, len(pool.held), now)
                elif pool is lane.own_seats or (spare := len(pool.held) - need(lane, pool)) <= 0:
                    pool.spare_since = None
                    continue
                elif pool.spare_since is None or now - pool.spare_since < self.poll_interval:
                    pool.spare_since = pool.spare_since or now
                    continue
                else:
                    spare_freed += let_go(pool, spare, now)
                pool.spare_since = None
                pool.take_at = now + self.poll_interval
        for freed, announce in ((dry_freed, False), (spare_freed, True)):
            if freed:
                try:
                    Job.objects.release_seats(self.worker_id, freed, announce=announce)
                except (DatabaseError, SeatsUnavailable) as exc:  # they come free when their leases run out
                    logger.warning("worker %s: could not free seats %s (%s)", self.worker_id, freed, exc)

    def _seat_woken(self, lane: Lane, queue: str | None) -> None:
        """A wake-up for ``queue`` (None: any): the lane may take its seats, and those of the capped
        tasks whose own queue it is, at once. Holds lane.cond."""
        for name, pool in lane.seats.items():
            if (
                queue is None
                or name == queue
                or (pool.task is not None and pool.home and pool.queue == queue)
            ):
                pool.take_at = 0.0

    @staticmethod
    def _handed_seated(lane: Lane, entries: Iterable[Running]) -> None:
        """Claimed jobs under caps enter the lane: each waits for a slot, then for its seats (those of
        the pools it needs as it enters, whatever caps are read later)."""
        if not lane.seats:
            return
        with lane.cond:
            for entry in entries:
                entry.seat_pools = pools_of(lane, entry.job)
                for pool in entry.seat_pools:
                    pool.waiting += 1

    @staticmethod
    def _left_waiting(lane: Lane, entries: Iterable[Running], but: SeatPool | None = None) -> None:
        """Jobs taken off the lane unstarted (given back; parked in ``but``, which has let them go)."""
        if not lane.seats:
            return
        with lane.cond:
            for entry in entries:
                for pool in entry.seat_pools:
                    if pool is not but:
                        pool.waiting -= 1

    def _sit(self, lane: Lane, entry: Running) -> Sat:
        """A slot took ``entry`` off the lane's queue: may it start it? A job under caps needs a free
        seat of each: a capped queue's own lane waits for one of its queue while it holds a usable seat;
        otherwise the job is parked in the first pool with no free seat (a slot whose job in that pool
        ends runs it next). REFUSED (give it back) when stopping, or when a pool it needs has no usable
        seat (renewals stopped reaching the database)."""
        pools = entry.seat_pools
        if not pools:
            return Sat.FREE
        with lane.cond:
            sat, parked_in = Sat.REFUSED, None
            while not self.stopping.is_set() and not entry.lost:  # counted waiting meanwhile: its
                now = time.monotonic()  # seats stay held (_free_spare_seats)
                full = next((pool for pool in pools if pool.free(now) <= 0), None)
                if full is None:
                    for pool in pools:
                        pool.in_use += 1
                    sat = Sat.SEATED
                    break
                if not all(pool.usable(now) for pool in pools):
                    break
                if full is not lane.own_seats:
                    full.parked.append(entry)
                    sat, parked_in = Sat.PARKED, full
                    break
                lane.cond.wait(timeout=0.25)
            for pool in pools:  # a job parked in one pool still waits for the others' seats
                if parked_in is None or pool is parked_in:
                    pool.waiting -= 1
            if sat is Sat.REFUSED:  # a seat this job was handed may be free for a parked one
                for pool in pools:
                    self._rehome(lane, pool)
            return sat

    def _stand(self, lane: Lane, entry: Running, n: int = 1, *, hand_off: bool = False) -> Running | None:
        """``n`` jobs in ``entry``'s seats (a batch's further jobs: its queue's) ended in the lane's
        slots: their seats are free for the parked jobs (_rehome); with ``hand_off``, the first of those
        is returned for the calling slot to run next."""
        with lane.cond:
            pools = entry.seat_pools
            for pool in pools:
                pool.in_use -= n
            lane.cond.notify_all()
            first = None
            for pool in pools:
                handed = self._rehome(lane, pool, hand_off=hand_off and first is None)
                first = first or handed
            return first

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
            self._left_waiting(lane, pool.parked, but=pool)
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
                    self._left_waiting(lane, pool.parked, but=pool)
                    pool.parked.clear()
        return out

    def _sit_more(self, lane: Lane, queue: str, most: int) -> int:
        """A batch's further jobs: seats of ``queue`` for up to ``most`` of them, taken now, without
        waiting (more seats than the lane's slots when free: a batch's jobs run in one slot); how many."""
        pool = lane.seats[queue]
        with lane.cond:
            short = min(most - pool.free(time.monotonic()), pool.cap - len(pool.held))
        if short > 0:
            self._take(lane, {queue: (pool, short)})
        with lane.cond:
            n = max(0, min(most, pool.free(time.monotonic())))
            pool.in_use += n
            return n

    @staticmethod
    def _seat_wanted(lane: Lane, entry: Running) -> bool:
        """A job needing a seat ``entry`` holds waits in the lane for one (a retry waiting in its slot
        gives its seats up for it). Holds lane.cond."""
        return any(pool.waiting > 0 or pool.parked for pool in entry.seat_pools)

    def _seats_fresh(self, lane: Lane, entry: Running) -> bool:
        """Every seat the lane holds of ``entry``'s caps is still usable (True for none): a batch that
        filled for a while, or an in-slot retry, starts only then."""
        with lane.cond:
            now = time.monotonic()
            return all(pool.usable(now) == len(pool.held) for pool in entry.seat_pools)
