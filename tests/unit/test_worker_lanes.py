"""Lane arithmetic (django_jobq.worker.lanes): how many jobs a lane may hold ahead of its slots."""

from django_jobq.worker.lanes import SHORT_RUN_SECONDS, Lane


def _lane(slots: int = 4, run: float | None = None, cycle: float | None = None) -> Lane:
    lane = Lane("default", slots)
    if run is not None:
        lane.ran(run)
    if cycle is not None:
        lane.cycled(cycle)
    return lane


def test_before_any_cycle_is_measured_a_short_lane_claims_the_whole_claim_ahead():
    lane = _lane(run=0.001)
    assert lane.ahead(8) == 8
    assert lane.capacity(8, now=0.0) == 4 + 4 * 8


def test_runs_much_shorter_than_a_cycle_claim_up_to_claim_ahead_and_no_more():
    lane = _lane(run=0.0001, cycle=0.002)  # 40 runs per two cycles
    assert lane.ahead(8) == 8
    assert lane.capacity(8, now=0.0) == 36


def test_a_slot_holds_ahead_only_what_it_runs_during_two_cycles():
    assert _lane(run=0.001, cycle=0.002).ahead(8) == 4
    assert _lane(run=0.003, cycle=0.002).ahead(8) == 2  # ceil(4 / 3)


def test_runs_longer_than_two_cycles_still_keep_one_job_ahead_per_slot():
    lane = _lane(run=0.03, cycle=0.002)
    assert lane.ahead(8) == 1
    assert lane.capacity(8, now=0.0) == 8


def test_claim_ahead_zero_turns_it_off_whatever_the_timings():
    lane = _lane(run=0.0001, cycle=0.01)
    assert lane.ahead(0) == 0
    assert lane.capacity(0, now=0.0) == 4


def test_long_runs_earn_no_job_ahead():
    lane = _lane(run=SHORT_RUN_SECONDS * 2, cycle=0.002)
    assert lane.capacity(8, now=0.0) == 4


def test_a_slower_cycle_gives_nothing_back_it_only_stops_claiming_more():
    lane = _lane(slots=1, run=0.0001, cycle=0.002)
    for _ in range(9):  # one job for the slot and eight claimed ahead, none started
        lane.work.put(None)
    for _ in range(30):  # the cycles slow down: the lane would now hold ahead less
        lane.cycled(0.0001 / 8)
    assert lane.ahead(8) == 1
    assert lane.surplus(8, now=0.0) == 0
    assert lane.capacity(8, now=0.0) == 2


def test_the_averages_follow_recent_runs_and_cycles():
    lane = _lane(run=0.01, cycle=0.01)
    for _ in range(40):
        lane.ran(0.001)
        lane.cycled(0.002)
    assert lane.ahead(8) == 4
