"""What a worker's writes about the runs it holds did, as the manager returns it."""

from __future__ import annotations

from dataclasses import dataclass

Run = tuple[int, int]  # (job id, fence)


@dataclass(frozen=True, slots=True)
class Written:
    """A write of finished runs: the ids it ended DONE, those it ended CANCELLED (a cancel was asked
    while they ran: their results discarded), and the busy ones, still RUNNING and owned, which a row
    lock held by another transaction kept it from writing (write them again; nothing was waited for);
    ``settled``: an ended job had dependents, which the same write released or cancelled."""

    done: frozenset[int] = frozenset()
    cancelled: frozenset[int] = frozenset()
    busy: frozenset[int] = frozenset()
    settled: bool = False  # one of the jobs ended had dependents: the write settled them too

    @property
    def ended(self) -> frozenset[int]:
        return self.done | self.cancelled


@dataclass(frozen=True, slots=True)
class Beat:
    """A heartbeat: the held runs no longer owned (lost), those still owned that a cancel was asked of
    (asked), and those it could not renew because another transaction holds their row (busy: not
    renewed, not lost)."""

    lost: frozenset[Run] = frozenset()
    asked: frozenset[Run] = frozenset()
    busy: frozenset[Run] = frozenset()
