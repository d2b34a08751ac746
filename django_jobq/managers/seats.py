"""The seats of capped queues (JOBQ["QUEUES"][q]["MAX_RUNNING"]) and capped tasks (@task(max_running=N)):
a worker takes seats, renews them with its heartbeat and frees them (sql/postgres/seats.py); it starts a
job under a cap only in a seat of it that it holds (worker/seats.py).

A cap's seats live on one database (seats_database), whichever database its jobs are on: a queue's
on its own, a spread queue's and every task's on the home database. A worker of another database
reaches them through the process's autocommit pool (autocommit.py), and SeatsUnavailable says that
database did not answer (the worker's own database may be fine: it is no outage of it)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import InterfaceError, OperationalError, connections

from .. import autocommit, validation
from ..conf import home_database, jobq_settings
from ..exceptions import SeatsUnavailable
from ..shards import databases_of_queue
from .base import BaseJobManager

Seat = tuple[str, int, int]  # (seats' name: a queue's, or task_seats(task); seat number; fence)

# A capped task's seats are named so in jobq_cap_seat (a queue's, by the queue's name). A capped queue
# named "task:NAME" for a capped task NAME would share those rows: a worker runs its jobs in the task's
# seats and counts the queue's cap under its lock instead (docs/guide/flow-control.md, "Names").
TASK_SEATS = "task:"


def task_seats(task: str) -> str:
    """The name of ``task``'s seats."""
    return TASK_SEATS + task


def seats_database(name: str) -> str:
    """The alias that holds the seats named ``name``: a capped queue's own database; the home
    database for a queue spread over several and for every capped task (whose jobs may be on any), so
    that one set of seats bounds its jobs on every database."""
    if name.startswith(TASK_SEATS):
        return home_database()
    found = databases_of_queue(name)
    return found[0] if len(found) == 1 else home_database()


def by_database(names: Iterable[str]) -> dict[str, list[str]]:
    """``names`` grouped by the database of their seats (seats_database), in order."""
    grouped: dict[str, list[str]] = defaultdict(list)
    for name in names:
        grouped[seats_database(name)].append(name)
    return dict(grouped)


class SeatManager(BaseJobManager):
    def take_seats(
        self, worker_id: str, queue: str, cap: int, want: int, lease_seconds: float | None = None
    ) -> list[tuple[int, int]]:
        """Up to ``want`` free seats of ``queue`` (capped at ``cap``) for ``worker_id``, leased: each
        as (seat number, fence)."""
        return self.take_seats_of(worker_id, {queue: (cap, want)}, lease_seconds)[queue]

    def take_seats_of(
        self, worker_id: str, wanted: Mapping[str, tuple[int, int]], lease_seconds: float | None = None
    ) -> dict[str, list[tuple[int, int]]]:
        """take_seats for several caps at once, in a statement per database of their seats: ``wanted``
        maps each seats' name to (cap, want); per name, the seats taken."""
        caps = {
            validation.queue(name): (
                validation.integer(cap, "cap", 1, 1_000_000), validation.integer(want, "want", 1, 1_000_000)
            )
            for name, (cap, want) in wanted.items()
        }  # fmt: skip
        worker = {"worker_id": validation.name(worker_id, "worker_id"), "lease": self._lease(lease_seconds)}
        taken: dict[str, list[tuple[int, int]]] = {}
        away: list[SeatsUnavailable] = []
        for alias, names in by_database(caps).items():
            try:
                taken.update(self._take_on(alias, worker, {name: caps[name] for name in names}))
            except SeatsUnavailable as exc:  # the other databases' seats are still taken
                away.append(exc)
        _raise_away(away, taken)
        return taken

    def _take_on(
        self, alias: str, worker: dict[str, Any], caps: dict[str, tuple[int, int]]
    ) -> dict[str, list[tuple[int, int]]]:
        taken, made = self._take(alias, {**worker, **self._wanted(caps)})
        unmade = {name: (cap, want) for name, (cap, want) in caps.items() if made[name] < cap}
        if unmade:  # a cap's first take, or a raised cap: make its missing seats, and take again
            self._seat_rows(alias, self._sql().SEAT_SEED, self._wanted(unmade))
            again = {
                n: (cap, want - len(taken[n])) for n, (cap, want) in unmade.items() if want > len(taken[n])
            }
            if again:
                for name, seats in self._take(alias, {**worker, **self._wanted(again)})[0].items():
                    taken[name] += seats
        return taken

    @staticmethod
    def _wanted(caps: Mapping[str, tuple[int, int]]) -> dict[str, list[Any]]:
        return {
            "queues": list(caps),
            "caps": [cap for cap, _ in caps.values()],
            "wants": [want for _, want in caps.values()],
        }

    def _take(
        self, alias: str, params: dict[str, Any]
    ) -> tuple[dict[str, list[tuple[int, int]]], dict[str, int]]:
        """SEAT_TAKE: per name, the seats taken, and how many it has below its cap."""
        taken: dict[str, list[tuple[int, int]]] = {name: [] for name in params["queues"]}
        made: dict[str, int] = {}
        for name, seat, value in self._seat_rows(alias, self._sql().SEAT_TAKE, params):
            if seat is None:
                made[name] = int(value)
            else:
                taken[name].append((int(seat), int(value)))
        return taken, made

    def renew_seats(
        self, worker_id: str, seats: Sequence[Seat], lease_seconds: float | None = None
    ) -> set[Seat]:
        """Extend the leases of ``seats`` (queue, seat, fence); those still held under that fence,
        the others are lost (a worker's lanes may each have held one seat under successive fences).
        Seats on several databases: each database's renewed in turn; when one does not answer,
        SeatsUnavailable once the others are renewed, its ``partial`` the seats kept (as take_seats_of's
        is the seats taken, and release_seats's how many were freed)."""
        lease = self._lease(lease_seconds)
        kept: set[Seat] = set()
        away: list[SeatsUnavailable] = []
        for alias, named in self._grouped(seats).items():
            params = {**self._named(worker_id, named), "lease": lease}
            try:
                rows = self._seat_rows(alias, self._sql().SEAT_RENEW, params)
            except SeatsUnavailable as exc:
                away.append(exc)
                continue
            kept |= {(queue, int(seat), int(fence)) for queue, seat, fence in rows}
        _raise_away(away, kept)
        return kept

    def release_seats(
        self, worker_id: str, seats: Sequence[Seat] | None = None, *, announce: bool = True
    ) -> int:
        """Free ``seats`` (queue, seat, fence), or every seat ``worker_id`` holds on the current
        database (None); how many. With ``announce`` (and JOBQ["NOTIFY"] on) the workers of the
        seats' database are woken by a notification named after each seats' name freed, so one
        waiting for them takes them at once."""
        sql = self._sql()
        if seats is None:
            params = self._notify_params({"worker_id": validation.name(worker_id, "worker_id")})
            params["notify"] = bool(params["notify"]) and announce
            return len(self._execute(sql.SEAT_RELEASE_ALL, params))
        freed = 0
        away: list[SeatsUnavailable] = []
        for alias, named in self._grouped(seats).items():
            params = self._notify_params(self._named(worker_id, named))
            params["notify"] = bool(params["notify"]) and announce
            try:
                freed += len(self._seat_rows(alias, sql.SEAT_RELEASE, params))
            except SeatsUnavailable as exc:  # those come free when their leases run out
                away.append(exc)
        _raise_away(away, freed)
        return freed

    @staticmethod
    def _grouped(seats: Sequence[Seat]) -> dict[str, list[Seat]]:
        grouped: dict[str, list[Seat]] = defaultdict(list)
        for seat in seats:
            grouped[seats_database(seat[0])].append(seat)
        return dict(grouped)

    @staticmethod
    def _named(worker_id: str, seats: Sequence[Seat]) -> dict[str, Any]:
        queues, numbers, fences = (list(column) for column in zip(*seats, strict=True))
        return {
            "worker_id": validation.name(worker_id, "worker_id"),
            "queues": queues,
            "seats": numbers,
            "fences": fences,
        }

    def _seat_rows(self, alias: str, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """A seat statement's rows, run on ``alias``: on the current connection when that is its
        database, else alone on the process's autocommit pool for it (each seat statement stands
        alone: sql/postgres/seats.py), waited for at most half a heartbeat, so that neither a
        heartbeat nor a lane's claims wait long on another database. One that does not answer in time
        (down, cut off, past JOBQ["STATEMENT_TIMEOUT"], a busy pool) is SeatsUnavailable."""
        if alias == jobq_settings().database:
            return self._execute(statement, params)
        wait = jobq_settings().heartbeat_seconds / 2
        try:
            with connections[alias].wrap_database_errors:
                return autocommit.rows_within(alias, statement, self._common(params), wait)
        except (OperationalError, InterfaceError) as exc:
            raise SeatsUnavailable(f"the seats' database {alias!r} did not answer: {exc}", [alias]) from exc


def _raise_away(away: list[SeatsUnavailable], partial: Any) -> None:
    """SeatsUnavailable naming every database of ``away`` (each a database that did not answer), with
    what the others did (``partial``); nothing when every database answered."""
    if away:
        exc = SeatsUnavailable("; ".join(str(each) for each in away), [each.database for each in away])
        exc.partial = partial
        raise exc
