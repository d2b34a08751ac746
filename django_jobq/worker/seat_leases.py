"""The leases of a worker's seats (worker/seats.py): the heartbeat renews them, a stopping worker frees
them, and a database of seats that does not answer (managers/seats.py, SeatsUnavailable: another
database than the worker's own) is logged once until it answers again, its seats left to age rather
than counted lost."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from ..conf import jobq_settings
from ..exceptions import SeatsUnavailable
from ..managers.seats import seats_database
from ..models import Job
from .base import WorkerBase

logger = logging.getLogger("django_jobq")


class SeatLeaseMixin(WorkerBase):
    _took_seats: bool  # some lane took seats once: a stopping worker frees them
    _seats_away: set[str]  # databases of seats that did not answer last time (logged once)

    def _renew_seats(self, lease: float) -> None:
        """The heartbeat: renew every seat the worker holds in one statement; a seat found lost is
        dropped (its cap's jobs wait for another)."""
        pools = [(lane, pool) for lane in self.lanes.values() for pool in list(lane.seats.values())]
        named: list[tuple[str, int, int]] = []
        for lane, pool in pools:
            with lane.cond:
                named += pool.named()
        if not named:
            return
        sent = time.monotonic()
        away: frozenset[str] = frozenset()  # databases whose seats were not renewed: they age, not lost
        try:
            kept = Job.objects.renew_seats(self.worker_id, named, lease)
        except SeatsUnavailable as exc:
            kept, away = exc.partial, exc.databases
            self._seats_unanswered(exc)
        self._seats_answered([pool.name for _, pool in pools], away)
        lost = []
        for lane, pool in pools:
            if away and seats_database(pool.name) in away:
                continue
            with lane.cond:
                for seat, (fence, _) in list(pool.held.items()):
                    if (pool.name, seat, fence) not in named:
                        continue  # taken after the renewal was read
                    if (pool.name, seat, fence) in kept:
                        pool.held[seat] = (fence, sent)
                    else:
                        del pool.held[seat]
                        lost.append(f"{pool.name}#{seat}")
                lane.cond.notify_all()
        if lost:
            logger.warning("worker %s lost seat(s) %s of capped queues or tasks (leases ran out); their jobs "
                           "wait for others", self.worker_id, lost)  # fmt: skip

    def _free_all_seats(self) -> None:
        """A stopping worker frees every seat it holds: on one database, every seat under its id, known
        to it or not (a take whose answer was lost); with JOBQ["SHARDS"], those it knows of (the
        workers of its other databases, under the same id, may still run jobs in theirs)."""
        if not self._took_seats:
            return
        held: list[tuple[str, int, int]] = []
        for lane in self.lanes.values():
            with lane.cond:
                for pool in lane.seats.values():
                    held += pool.named()
                    pool.held.clear()
        if not jobq_settings().shards:
            self._db(lambda: Job.objects.release_seats(self.worker_id), attempts=3)
        elif held:
            try:
                self._db(lambda: Job.objects.release_seats(self.worker_id, held), attempts=3)
            except SeatsUnavailable as exc:  # they come free when their leases run out
                logger.warning("worker %s: could not free its seats (%s)", self.worker_id, exc)

    def _seats_unanswered(self, exc: SeatsUnavailable) -> None:
        """Log, once until it answers again, each database of seats that did not answer."""
        for alias in sorted(exc.databases - self._seats_away):
            self._seats_away.add(alias)
            logger.warning("worker %s: the seats' database %r does not answer (%s); the jobs under its caps "
                           "wait until it does (its other work goes on)", self.worker_id, alias, exc)  # fmt: skip

    def _seats_answered(self, names: Iterable[str], away: frozenset[str] = frozenset()) -> None:
        """The databases of these seats answered, but those ``away``: log their return once."""
        if self._seats_away:
            for alias in {seats_database(name) for name in names} & self._seats_away - away:
                self._seats_away.discard(alias)
                logger.warning("worker %s: the seats' database %r answers again", self.worker_id, alias)
