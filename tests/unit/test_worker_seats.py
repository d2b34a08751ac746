"""A lane's seat bookkeeping (django_jobq.worker.seats): which job a slot may start, which waits, and
that a parked job always ends up run or given back, whatever frees its seat."""

import logging
import threading
import time

import pytest
from django.db import OperationalError

from django_jobq.conf import jobq_settings
from django_jobq.models import Job
from django_jobq.worker.lanes import Lane, Running
from django_jobq.worker.outage import Outage
from django_jobq.worker.seats import Sat, SeatMixin, SeatPool


class Slots(SeatMixin):
    """The parts of a worker the seat bookkeeping uses."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.worker_id, self.poll_interval, self.outage = "w-1", 0.5, Outage("w-1")


def star_lane(seats: int, cap: int = 4, *, fresh: bool = True) -> Lane:
    lane = Lane("*", 4)
    renewed = time.monotonic() - (0 if fresh else 3600)
    lane.seats["q"] = SeatPool("q", cap, held={n: (1, renewed) for n in range(seats)})
    return lane


def handed(lane: Lane, job_id: int) -> Running:
    """A job of queue q as the dispatcher hands it to the lane."""
    entry = Running(Job(id=job_id, queue="q", task="t", fence=1), 1, 1, lane, None)
    lane.seats["q"].waiting += 1
    return entry


def queued(lane: Lane) -> list[int]:
    out = []
    while not lane.work.empty():
        out.append(lane.work.get_nowait().job.id)
    return out


def test_a_job_starts_in_a_free_seat_and_parks_when_every_seat_is_in_use():
    slots, lane = Slots(), star_lane(seats=1)
    a, b = handed(lane, 1), handed(lane, 2)
    assert slots._sit(lane, a) is Sat.SEATED and slots._sit(lane, b) is Sat.PARKED
    pool = lane.seats["q"]
    assert (pool.in_use, pool.waiting, list(pool.parked)) == (1, 0, [b])


def test_the_slot_whose_job_ends_runs_the_parked_one_next():
    slots, lane = Slots(), star_lane(seats=1)
    a, b = handed(lane, 1), handed(lane, 2)
    slots._sit(lane, a), slots._sit(lane, b)
    assert slots._stand(lane, "q", hand_off=True) is b
    assert slots._sit(lane, b) is Sat.SEATED


def test_seats_freed_without_a_hand_off_send_the_parked_jobs_back_to_the_lanes_queue():
    """A batch's further jobs free their seats with no slot to hand a job to: the parked jobs that fit
    go back on the lane's queue, for any slot; none is dropped."""
    slots, lane = Slots(), star_lane(seats=2)
    a, b, c, d = (handed(lane, n) for n in range(1, 5))
    assert [slots._sit(lane, e) for e in (a, b, c, d)] == [Sat.SEATED, Sat.SEATED, Sat.PARKED, Sat.PARKED]
    slots._stand(lane, "q", 2)
    assert queued(lane) == [3, 4] and lane.seats["q"].waiting == 2 and not lane.seats["q"].parked


def test_a_handed_job_refused_passes_its_free_seat_on_to_the_next_parked_job():
    slots, lane = Slots(), star_lane(seats=1)
    a, b, c = handed(lane, 1), handed(lane, 2), handed(lane, 3)
    [slots._sit(lane, e) for e in (a, b, c)]
    nxt = slots._stand(lane, "q", hand_off=True)
    nxt.lost = True  # a heartbeat found it no longer ours
    assert slots._sit(lane, nxt) is Sat.REFUSED
    assert queued(lane) == [3]  # not left parked behind a seat nobody will free


def test_parked_jobs_go_back_when_no_seat_is_usable_any_more():
    slots, lane = Slots(), star_lane(seats=1)
    a, b = handed(lane, 1), handed(lane, 2)
    slots._sit(lane, a), slots._sit(lane, b)
    lane.seats["q"].held = {0: (1, time.monotonic() - 3600)}  # renewals stopped reaching the database
    assert slots._stand(lane, "q", hand_off=True) is None
    assert lane.unstarted == [b] and not lane.seats["q"].parked


def test_nothing_starts_in_a_seat_whose_renewal_is_too_old():
    slots, lane = Slots(), star_lane(seats=2, fresh=False)
    assert slots._sit(lane, handed(lane, 1)) is Sat.REFUSED


@pytest.mark.parametrize("stopping", [True, False])
def test_parked_jobs_are_given_back_when_stopping_and_kept_while_runs_are_short(stopping):
    slots, lane = Slots(), star_lane(seats=1)
    lane.ran(0.001)
    a, b = handed(lane, 1), handed(lane, 2)
    slots._sit(lane, a), slots._sit(lane, b)
    assert slots._unpark(lane, everything=stopping) == ([b] if stopping else [])


def test_parked_jobs_are_given_back_once_the_lanes_runs_are_long():
    slots, lane = Slots(), star_lane(seats=1)
    lane.ran(5.0)
    a, b = handed(lane, 1), handed(lane, 2)
    slots._sit(lane, a), slots._sit(lane, b)
    assert slots._unpark(lane, everything=False) == [b]


def test_the_star_lane_claims_per_usable_seat_less_what_it_holds():
    slots, lane = Slots(), star_lane(seats=2)
    lane.ran(0.001)  # short runs: it claims ahead, as many per seat as per slot
    lane.cycled(0.004)
    per_seat = 1 + lane.ahead(jobq_settings().claim_ahead)
    assert per_seat > 1 and slots._seated(lane) == {"q": 2 * per_seat}
    slots._sit(lane, handed(lane, 1))
    handed(lane, 2)  # waiting in the lane's queue
    lane.seats["q"].held[1] = (1, time.monotonic() - 3600)  # one seat stale: not counted
    assert slots._seated(lane) == {"q": per_seat - 1 - 1}
    lane.held = ("q",)  # paused: not claimed
    assert slots._seated(lane) == {}


def test_seat_takes_that_find_the_database_away_join_the_outage_log_once(monkeypatch, caplog):
    def away(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(Job.objects, "take_seats", away)
    monkeypatch.setattr(Job.objects, "bound_statements", lambda: None)
    slots, lane = Slots(), star_lane(seats=0)
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        assert [slots._take(lane, lane.seats["q"], 2) for _ in range(20)] == [0] * 20
    assert [r.getMessage() for r in caplog.records] == [
        "worker w-1: the database is unreachable (lane *'s seat take: connection refused); retrying, further "
        "errors are summarised every 30s"
    ]
