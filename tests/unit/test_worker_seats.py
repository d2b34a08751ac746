"""A lane's seat bookkeeping (django_jobq.worker.seats): which job a slot may start, which waits, and
that a parked job always ends up run or given back, whatever frees its seat."""

import logging
import threading
import time

import pytest
from django.db import OperationalError

from django_jobq.conf import jobq_settings
from django_jobq.managers.seats import TASK_SEATS
from django_jobq.models import Job
from django_jobq.worker.lanes import Lane, Running
from django_jobq.worker.outage import Outage
from django_jobq.worker.seat_pools import Sat, SeatPool
from django_jobq.worker.seats import SeatMixin
from django_jobq.worker.slots import SlotMixin


class Slots(SeatMixin):
    """The parts of a worker the seat bookkeeping uses."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.worker_id, self.poll_interval, self.outage = "w-1", 0.5, Outage("w-1")
        self._seats_away = set()


def star_lane(seats: int, cap: int = 4, *, fresh: bool = True) -> Lane:
    lane = Lane("*", 4)
    renewed = time.monotonic() - (0 if fresh else 3600)
    lane.seats["q"] = SeatPool("q", cap, held={n: (1, renewed) for n in range(seats)})
    return lane


def handed(lane: Lane, job_id: int, task: str = "t") -> Running:
    """A job of queue q as the dispatcher hands it to the lane."""
    entry = Running(Job(id=job_id, queue="q", task=task, fence=1), 1, 1, lane, None)
    SeatMixin._handed_seated(lane, [entry])
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
    assert slots._stand(lane, a, hand_off=True) is b
    assert slots._sit(lane, b) is Sat.SEATED


def test_seats_freed_without_a_hand_off_send_the_parked_jobs_back_to_the_lanes_queue():
    """A batch's further jobs free their seats with no slot to hand a job to: the parked jobs that fit
    go back on the lane's queue, for any slot; none is dropped."""
    slots, lane = Slots(), star_lane(seats=2)
    a, b, c, d = (handed(lane, n) for n in range(1, 5))
    assert [slots._sit(lane, e) for e in (a, b, c, d)] == [Sat.SEATED, Sat.SEATED, Sat.PARKED, Sat.PARKED]
    slots._stand(lane, a, 2)
    assert queued(lane) == [3, 4] and lane.seats["q"].waiting == 2 and not lane.seats["q"].parked


def test_a_handed_job_refused_passes_its_free_seat_on_to_the_next_parked_job():
    slots, lane = Slots(), star_lane(seats=1)
    a, b, c = handed(lane, 1), handed(lane, 2), handed(lane, 3)
    [slots._sit(lane, e) for e in (a, b, c)]
    nxt = slots._stand(lane, a, hand_off=True)
    nxt.lost = True  # a heartbeat found it no longer ours
    assert slots._sit(lane, nxt) is Sat.REFUSED
    assert queued(lane) == [3]  # not left parked behind a seat nobody will free


def test_parked_jobs_go_back_when_no_seat_is_usable_any_more():
    slots, lane = Slots(), star_lane(seats=1)
    a, b = handed(lane, 1), handed(lane, 2)
    slots._sit(lane, a), slots._sit(lane, b)
    lane.seats["q"].held = {0: (1, time.monotonic() - 3600)}  # renewals stopped reaching the database
    assert slots._stand(lane, a, hand_off=True) is None
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

    monkeypatch.setattr(Job.objects, "take_seats_of", away)
    monkeypatch.setattr(Job.objects, "bound_statements", lambda: None)
    slots, lane = Slots(), star_lane(seats=0)
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        assert [slots._take(lane, {"q": (lane.seats["q"], 2)}) for _ in range(20)] == [{}] * 20
    assert [r.getMessage() for r in caplog.records] == [
        "worker w-1: the database is unreachable (lane *'s seat take: connection refused); retrying, further "
        "errors are summarised every 30s"
    ]


def task_pool(lane: Lane, seats: int, cap: int = 4, task: str = "t") -> SeatPool:
    pool = SeatPool(TASK_SEATS + task, cap, task, held={n: (1, time.monotonic()) for n in range(seats)})
    lane.seats[pool.name] = pool
    return pool


def test_a_job_under_a_queue_cap_and_a_task_cap_starts_only_with_a_seat_of_each():
    slots, lane = Slots(), star_lane(seats=2)
    tasks = task_pool(lane, seats=1)
    a, b = handed(lane, 1), handed(lane, 2)
    assert slots._sit(lane, a) is Sat.SEATED
    assert slots._sit(lane, b) is Sat.PARKED  # a queue seat is free, the task's is not
    queue = lane.seats["q"]
    assert (queue.in_use, tasks.in_use, list(tasks.parked), queue.parked) == (1, 1, [b], type(queue.parked)())
    assert queue.waiting == 1  # still waits for a queue seat: the queue's seats stay held for it
    assert slots._stand(lane, a, hand_off=True) is b
    assert slots._sit(lane, b) is Sat.SEATED
    assert (queue.in_use, queue.waiting, tasks.in_use, tasks.waiting) == (1, 0, 1, 0)


def test_a_job_of_another_task_is_not_held_back_by_a_task_cap():
    slots, lane = Slots(), Lane("*", 4)
    task_pool(lane, seats=1)
    a, b, other = handed(lane, 1), handed(lane, 2), handed(lane, 3, task="u")
    assert [slots._sit(lane, e) for e in (a, b, other)] == [Sat.SEATED, Sat.PARKED, Sat.FREE]


def test_a_task_caps_parked_job_given_back_leaves_no_count_behind_in_its_queues_pool():
    slots, lane = Slots(), star_lane(seats=2)
    tasks = task_pool(lane, seats=1)
    lane.ran(5.0)  # long runs: parked jobs go back
    a, b = handed(lane, 1), handed(lane, 2)
    slots._sit(lane, a), slots._sit(lane, b)
    assert slots._unpark(lane, everything=False) == [b]
    assert (lane.seats["q"].waiting, tasks.waiting, len(tasks.parked)) == (0, 0, 0)


def test_a_named_lane_parks_a_job_whose_tasks_seats_are_in_use_instead_of_waiting():
    slots, lane = Slots(), Lane("q", 4)
    task_pool(lane, seats=1)
    a, b = handed(lane, 1), handed(lane, 2)
    assert [slots._sit(lane, e) for e in (a, b)] == [Sat.SEATED, Sat.PARKED]


def test_the_claim_asks_for_a_task_per_usable_seat_less_what_it_holds():
    slots, lane = Slots(), Lane("q", 4)  # a named lane too: a task's pool is never its own
    task_pool(lane, seats=2)
    lane.ran(0.001)
    lane.cycled(0.004)
    per_seat = 1 + lane.ahead(jobq_settings().claim_ahead)
    slots._sit(lane, handed(lane, 1))
    handed(lane, 2)
    lane.held = ("q",)  # its queue paused: a task's seats are not a queue's
    assert slots._seated(lane) == {TASK_SEATS + "t": 2 * per_seat - 1 - 1}
    assert slots._seated_caps(lane, {TASK_SEATS + "t": 3}) == ({}, {"t": 3})


class Releases:
    def __init__(self):
        self.calls = []
        self.announced = []

    def __call__(self, worker_id, seats=None, *, announce=True):
        self.calls.append(seats)
        self.announced.append(announce)
        return len(seats or ())


@pytest.mark.parametrize(
    "case, freed",
    [
        ("found fewer than it could", 2),
        ("claim full of other jobs", 0),
        ("one of its jobs waits", 0),
    ],
)
def test_a_lane_frees_a_task_caps_seats_once_it_found_none_of_its_jobs(monkeypatch, case, freed):
    releases = Releases()
    monkeypatch.setattr(Job.objects, "release_seats", releases)
    slots, lane = Slots(), Lane("*", 4)
    pool = task_pool(lane, seats=2)
    other = [Job(id=n, queue="q", task="u") for n in range(4)]
    jobs, asked = {
        "found fewer than it could": (other[:1], 4),
        "claim full of other jobs": (other, 4),
        "one of its jobs waits": (other[:1], 4),
    }[case]
    if case == "one of its jobs waits":
        handed(lane, 9)
    slots._free_spare_seats(lane, {pool.name: 2}, jobs, asked)
    assert len(pool.held) == 2 - freed and sum(len(c) for c in releases.calls) == freed
    assert not any(releases.announced)  # a lane that found none of them: nobody is told


@pytest.mark.parametrize("kind", ["queue", "task"])
def test_seats_a_busy_lane_cannot_use_are_freed_after_a_poll_interval(monkeypatch, kind):
    """A "*" lane of 4 slots holding 3 seats, 3 of its slots inside runs of other work and one in a
    run of the cap's job: it can use 2 seats (the one in use, one per free slot). The third is kept
    for a poll interval, then freed (the one no longer usable first); those it uses are kept."""
    releases = Releases()
    monkeypatch.setattr(Job.objects, "release_seats", releases)
    slots, lane = Slots(), Lane("*", 4)
    if kind == "queue":
        pool = lane.seats["q"] = SeatPool("q", 4, held={n: (1, time.monotonic()) for n in range(3)})
    else:
        pool = task_pool(lane, seats=3)
    mine = handed(lane, 1)
    assert slots._sit(lane, mine) is Sat.SEATED
    lane.started = {0: time.monotonic(), 1: time.monotonic(), 2: time.monotonic()}
    pool.held[1] = (1, time.monotonic() - 3600)  # seat 1's renewals stopped
    full = [Job(id=n, queue="other", task="u") for n in range(4)]
    slots._free_spare_seats(lane, {pool.name: 8}, full, 4)
    assert len(pool.held) == 3 and not releases.calls  # spare since now
    pool.spare_since -= slots.poll_interval
    slots._free_spare_seats(lane, {pool.name: 8}, full, 4)
    assert sorted(pool.held) == [0, 2] and releases.calls == [[(pool.name, 1, 1)]]
    assert releases.announced == [True]  # a worker waiting for them takes them at once
    assert pool.in_use == 1 and pool.take_at > time.monotonic()


def test_a_capped_queues_own_lane_keeps_its_seats_while_it_has_work(monkeypatch):
    monkeypatch.setattr(Job.objects, "release_seats", Releases())
    slots, lane = Slots(), Lane("q", 4)
    pool = lane.seats["q"] = SeatPool("q", 4, held={n: (1, time.monotonic()) for n in range(4)})
    lane.started = {n: time.monotonic() for n in range(4)}  # (its slots run the queue's jobs)
    pool.spare_since = time.monotonic() - 60
    slots._free_spare_seats(lane, {"q": 1 << 30}, [Job(id=1, queue="q", task="u")], 1)
    assert len(pool.held) == 4


def test_a_lane_away_from_a_tasks_queue_takes_its_seats_only_after_a_claim_found_too_little(monkeypatch):
    taken = []
    monkeypatch.setattr(
        Job.objects, "take_seats_of", lambda worker, caps: taken.extend(caps) or {n: [(0, 1)] for n in caps}
    )
    monkeypatch.setattr(Job.objects, "bound_statements", lambda: None)
    monkeypatch.setattr(Job.objects, "release_seats", Releases())
    slots, lane = Slots(), Lane("emails", 4)
    pool = task_pool(lane, seats=0)
    pool.home = False
    slots._take_seats(lane)
    assert taken == []  # a busy lane of other work: never
    slots._free_spare_seats(lane, {pool.name: 0}, [], 4)  # a claim that found less than it asked
    slots._take_seats(lane)
    assert pool.name in taken  # (with the test app's capped tasks, none of them on queue emails)


class Retrier(SlotMixin):
    """The parts of a worker an in-slot retry's wait uses."""

    def __init__(self) -> None:
        self.stopping, self._lock = threading.Event(), threading.Lock()
        self.worker_id, self.poll_interval, self.outage = "w-1", 0.01, Outage("w-1")

    def _other_work_due(self, lane):
        return False


@pytest.mark.parametrize("fresh", [True, False])
def test_an_in_slot_retry_runs_again_only_in_seats_still_usable(fresh):
    """A job retried in its slot after a short delay starts its next attempt in the same seats: only
    while they are usable; else the retry goes back to the queue (due at once) and the slot is free."""
    retrier, lane = Retrier(), Lane("*", 1)
    pool = task_pool(lane, seats=1)
    entry = handed(lane, 1)
    assert retrier._sit(lane, entry) is Sat.SEATED
    lane.current[0] = entry
    if not fresh:
        pool.held[0] = (1, time.monotonic() - 3600)  # its renewals stopped while the attempt ran
    assert retrier._wait_to_retry(lane, 0, 0.01) == (None if fresh else 0.0)
