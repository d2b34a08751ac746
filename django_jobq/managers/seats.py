"""The seats of capped queues (JOBQ["QUEUES"][q]["MAX_RUNNING"]) and capped tasks (@task(max_running=N)):
a worker takes seats, renews them with its heartbeat and frees them (sql/postgres/seats.py); it starts a
job under a cap only in a seat of it that it holds (worker/seats.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import validation
from .base import BaseJobManager

Seat = tuple[str, int, int]  # (seats' name: a queue's, or task_seats(task); seat number; fence)

# A capped task's seats are named so in jobq_cap_seat (a queue's, by the queue's name). A queue that
# is itself named "task:NAME" shares its rows with that task's seats: each takes only seats below its
# own cap, so neither cap is ever exceeded (the two only leave each other fewer seats).
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
        params: dict[str, Any] = {
            "worker_id": validation.name(worker_id, "worker_id"),
            "queue": validation.queue(queue),
            "cap": validation.integer(cap, "cap", 1, 1_000_000),
            "want": validation.integer(want, "want", 1, 1_000_000),
            "lease": self._lease(lease_seconds),
        }
        sql = self._sql()
        seats, made = self._take(params)
        if made < params["cap"]:  # a queue's first take, or a raised cap: make its missing seats
            self._rowcount(sql.SEAT_SEED, params)
            more, _ = self._take({**params, "want": want - len(seats)}) if len(seats) < want else ([], 0)
            seats += more
        return seats

    def _take(self, params: dict[str, Any]) -> tuple[list[tuple[int, int]], int]:
        """SEAT_TAKE: the seats taken, and how many the queue has below its cap."""
        rows = self._execute(self._sql().SEAT_TAKE, params)
        made = next(int(count) for seat, count in rows if seat is None)
        return [(int(seat), int(fence)) for seat, fence in rows if seat is not None], made

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

    def release_seats(self, worker_id: str, seats: Sequence[Seat] | None = None) -> int:
        """Free ``seats`` (queue, seat, fence), or every seat ``worker_id`` holds (None); how many. The
        workers waiting for seats of those names are woken (on commit: at once, in autocommit)."""
        sql = self._sql()
        if seats is None:
            params = {"worker_id": validation.name(worker_id, "worker_id")}
            return len(self._execute(sql.SEAT_RELEASE_ALL, self._notify_params(params)))
        if not seats:
            return 0
        return len(self._execute(sql.SEAT_RELEASE, self._notify_params(self._named(worker_id, seats))))

    @staticmethod
    def _named(worker_id: str, seats: Sequence[Seat]) -> dict[str, Any]:
        queues, numbers, fences = (list(column) for column in zip(*seats, strict=True))
        return {
            "worker_id": validation.name(worker_id, "worker_id"),
            "queues": queues,
            "seats": numbers,
            "fences": fences,
        }
