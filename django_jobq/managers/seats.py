"""The seats of capped queues (JOBQ["QUEUES"][q]["MAX_RUNNING"]) and capped tasks (@task(max_running=N)):
a worker takes seats, renews them with its heartbeat and frees them (sql/postgres/seats.py); it starts a
job under a cap only in a seat of it that it holds (worker/seats.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import validation
from .base import BaseJobManager

Seat = tuple[str, int, int]  # (seats' name: a queue's, or task_seats(task); seat number; fence)

# A capped task's seats are named so in jobq_cap_seat (a queue's, by the queue's name). A capped queue
# named "task:NAME" for a capped task NAME would share those rows: a worker runs its jobs in the task's
# seats and counts the queue's cap under its lock instead (docs/guide/flow-control.md, "Names").
TASK_SEATS = "task:"


def task_seats(task: str) -> str:
    """The name of ``task``'s seats."""
    return TASK_SEATS + task


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
        """take_seats for several caps at once, in one statement: ``wanted`` maps each seats' name to
        (cap, want); per name, the seats taken."""
        caps = {
            validation.queue(name): (
                validation.integer(cap, "cap", 1, 1_000_000), validation.integer(want, "want", 1, 1_000_000)
            )
            for name, (cap, want) in wanted.items()
        }  # fmt: skip
        worker = {"worker_id": validation.name(worker_id, "worker_id"), "lease": self._lease(lease_seconds)}
        taken, made = self._take({**worker, **self._wanted(caps)})
        unmade = {name: (cap, want) for name, (cap, want) in caps.items() if made[name] < cap}
        if unmade:  # a cap's first take, or a raised cap: make its missing seats, and take again
            self._rowcount(self._sql().SEAT_SEED, self._wanted(unmade))
            again = {
                n: (cap, want - len(taken[n])) for n, (cap, want) in unmade.items() if want > len(taken[n])
            }
            if again:
                for name, seats in self._take({**worker, **self._wanted(again)})[0].items():
                    taken[name] += seats
        return taken

    @staticmethod
    def _wanted(caps: Mapping[str, tuple[int, int]]) -> dict[str, list[Any]]:
        return {
            "queues": list(caps),
            "caps": [cap for cap, _ in caps.values()],
            "wants": [want for _, want in caps.values()],
        }

    def _take(self, params: dict[str, Any]) -> tuple[dict[str, list[tuple[int, int]]], dict[str, int]]:
        """SEAT_TAKE: per name, the seats taken, and how many it has below its cap."""
        taken: dict[str, list[tuple[int, int]]] = {name: [] for name in params["queues"]}
        made: dict[str, int] = {}
        for name, seat, value in self._execute(self._sql().SEAT_TAKE, params):
            if seat is None:
                made[name] = int(value)
            else:
                taken[name].append((int(seat), int(value)))
        return taken, made

    def renew_seats(
        self, worker_id: str, seats: Sequence[Seat], lease_seconds: float | None = None
    ) -> set[Seat]:
        """Extend the leases of ``seats`` (queue, seat, fence); those still held under that fence,
        the others are lost (a worker's lanes may each have held one seat under successive fences)."""
        if not seats:
            return set()
        params = {**self._named(worker_id, seats), "lease": self._lease(lease_seconds)}
        rows = self._execute(self._sql().SEAT_RENEW, params)
        return {(queue, int(seat), int(fence)) for queue, seat, fence in rows}

    def release_seats(
        self, worker_id: str, seats: Sequence[Seat] | None = None, *, announce: bool = True
    ) -> int:
        """Free ``seats`` (queue, seat, fence), or every seat ``worker_id`` holds (None); how many. With
        ``announce`` (and JOBQ["NOTIFY"] on) the workers are woken by a notification named after each
        seats' name freed, so one waiting for them takes them at once."""
        sql = self._sql()
        params: dict[str, Any]
        if seats is None:
            params = {"worker_id": validation.name(worker_id, "worker_id")}
        elif not seats:
            return 0
        else:
            params = self._named(worker_id, seats)
        params = self._notify_params(params)
        params["notify"] = bool(params["notify"]) and announce
        return len(self._execute(sql.SEAT_RELEASE_ALL if seats is None else sql.SEAT_RELEASE, params))

    @staticmethod
    def _named(worker_id: str, seats: Sequence[Seat]) -> dict[str, Any]:
        queues, numbers, fences = (list(column) for column in zip(*seats, strict=True))
        return {
            "worker_id": validation.name(worker_id, "worker_id"),
            "queues": queues,
            "seats": numbers,
            "fences": fences,
        }
