"""The seats of capped queues (managers/seats.py, sql/postgres/seats.py, worker/seats.py): never more
seats held than the cap, across workers taking them at the same moment; a seat whose lease ran out
changes hands with a new fence, and its old holder can neither renew nor free it; a worker claims ahead
of its seats but starts no more jobs than it holds, frees its seats once idle or stopped, and a worker
cut off from the database starts nothing in a seat another worker may have taken."""

import datetime as dt
import json
import threading

import pytest
import time_machine
from django.db import connection, connections

from django_jobq.exceptions import JobqError
from django_jobq.managers import NewJob
from django_jobq.models import CapSeat, Job, JobStatus
from tests.conftest import start_worker, wait_until
from tests.occupancy import notes, peak
from tests.servers.proxy import PausableProxy

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def end_sessions(ports: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY(%s)", [ports]
        )


def holders(queue: str = "q") -> dict[int, str | None]:
    return dict(CapSeat.objects.filter(queue=queue).values_list("seat", "holder"))


@pytest.mark.p0
def test_no_more_seats_than_the_cap_are_held_across_workers():
    first = Job.objects.take_seats("a", "q", cap=3, want=5)
    assert sorted(seat for seat, _ in first) == [0, 1, 2]
    assert Job.objects.take_seats("b", "q", cap=3, want=1) == []
    assert holders() == {0: "a", 1: "a", 2: "a"}


@pytest.mark.p0
def test_concurrent_takes_never_share_a_seat():
    """Twelve threads, each on its own connection, take two seats of a queue capped at 5 at once."""
    taken: dict[str, list[int]] = {}
    gate = threading.Barrier(12)

    def take(worker: str) -> None:
        try:
            gate.wait(10)
            taken[worker] = [seat for seat, _ in Job.objects.take_seats(worker, "q", cap=5, want=2)]
        finally:
            connections.close_all()

    threads = [threading.Thread(target=take, args=(f"w{n}",)) for n in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    seats = [seat for mine in taken.values() for seat in mine]
    assert len(taken) == 12 and sorted(seats) == sorted(set(seats)) and set(seats) <= set(range(5))
    assert {seat: holder for seat, holder in holders().items() if holder} == {
        seat: worker for worker, mine in taken.items() for seat in mine
    }


@pytest.mark.p0
def test_a_seat_whose_lease_ran_out_changes_hands_and_its_old_holder_cannot_renew_or_free_it(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        [(seat, fence)] = Job.objects.take_seats("a", "q", cap=1, want=1, lease_seconds=10)
        clock.shift(9)
        assert Job.objects.take_seats("b", "q", cap=1, want=1) == []  # not yet
        assert Job.objects.renew_seats("a", [("q", seat, fence)], 10) == {("q", seat, fence)}
        clock.shift(11)
        [(again, new_fence)] = Job.objects.take_seats("b", "q", cap=1, want=1, lease_seconds=10)
        assert (again, new_fence) == (seat, fence + 1)
        assert Job.objects.renew_seats("a", [("q", seat, fence)], 10) == set()
        assert Job.objects.release_seats("a", [("q", seat, fence)]) == 0
        assert Job.objects.release_seats("a") == 0
        assert holders() == {0: "b"}
        assert Job.objects.release_seats("b", [("q", again, new_fence)]) == 1
        assert holders() == {0: None}


def test_a_seat_retaken_by_another_lane_of_the_same_worker_is_renewed_for_the_new_holder_only(python_clock):
    """Two lanes of one worker share a task's seats: a lane whose seat's lease ran out, retaken by the
    other lane under a higher fence, learns at the next renewal that it lost it."""
    with time_machine.travel(T0, tick=False) as clock:
        [(seat, fence)] = Job.objects.take_seats("a", "task:t", cap=1, want=1, lease_seconds=10)
        clock.shift(11)
        [(again, new_fence)] = Job.objects.take_seats("a", "task:t", cap=1, want=1, lease_seconds=10)
        assert (again, new_fence) == (seat, fence + 1)
        both = [("task:t", seat, fence), ("task:t", seat, new_fence)]
        assert Job.objects.renew_seats("a", both, 10) == {("task:t", seat, new_fence)}


def test_one_take_serves_several_caps_making_each_ones_seats():
    """A lane takes the seats of all its caps in one statement: each cap's seats made on its first
    take, each taken up to its want and its cap, none past it."""
    taken = Job.objects.take_seats_of("a", {"q": (2, 5), "task:t": (1, 1), "r": (3, 1)})
    assert {name: sorted(seat for seat, _ in seats) for name, seats in taken.items()} == {
        "q": [0, 1],
        "task:t": [0],
        "r": [0],
    }
    again = Job.objects.take_seats_of("b", {"q": (2, 1), "task:t": (1, 1), "r": (3, 5)})
    assert {name: sorted(seat for seat, _ in seats) for name, seats in again.items()} == {
        "q": [],
        "task:t": [],
        "r": [1, 2],
    }
    assert holders("r") == {0: "a", 1: "b", 2: "b"} and holders("task:t") == {0: "a"}


def test_a_lowered_cap_leaves_the_seats_past_it_and_a_raised_cap_makes_its_new_ones():
    Job.objects.take_seats("a", "q", cap=4, want=4)
    assert Job.objects.release_seats("a") == 4
    assert sorted(seat for seat, _ in Job.objects.take_seats("a", "q", cap=2, want=4)) == [0, 1]
    assert sorted(seat for seat, _ in Job.objects.take_seats("b", "q", cap=6, want=9)) == [2, 3, 4, 5]


@pytest.mark.parametrize(
    ("worker", "queue", "cap", "want"),
    [("a\x00b", "q", 2, 1), ("a", "q\ud800", 2, 1), ("a", "q'; DROP TABLE jobq_job; --", 0, 1), ("a", "q", 2, 0),
     ("a", "x" * 10_000, 2, 1), ("a", "q", 10**9, 1)],
)  # fmt: skip
def test_hostile_seat_requests_are_refused_before_anything_is_written(worker, queue, cap, want):
    with pytest.raises(JobqError):
        Job.objects.take_seats(worker, queue, cap=cap, want=want)
    assert not CapSeat.objects.exists()


@pytest.mark.parametrize("what", ["seated", "seated_tasks"])
@pytest.mark.parametrize(
    "seated", [{"q\x00": 1}, {"q\ud800": 1}, {"q": -1}, {"q": 1 << 40}, {"q": "many"}, {" q": 1}, {"": 1}]
)
def test_a_hostile_seated_claim_is_refused_before_anything_is_written(seated, what):
    job = Job.objects.enqueue("test.noop", queue="q")
    claimed = Job.objects.claim("w1", queues=["q"])
    with pytest.raises(JobqError):
        Job.objects.complete_and_claim("w1", [(job, claimed.fence, "null")], 1, "q", **{what: seated})
    assert Job.objects.get(id=job).status == JobStatus.RUNNING  # its completion not written


# A cap of ``n`` on the jobs of queue "capped": the queue's MAX_RUNNING (seats named "capped") or, the
# queue uncapped, its jobs' task's max_running (seats named "task:<task>").
CAPS = {
    ("queue", 1): ({"capped": {"MAX_RUNNING": 1}}, "test.occupy", "capped"),
    ("queue", 2): ({"capped": {"MAX_RUNNING": 2}}, "test.occupy", "capped"),
    ("task", 1): ({}, "test.capped_occupy_one", "task:test.capped_occupy_one"),
    ("task", 2): ({}, "test.capped_occupy", "task:test.capped_occupy"),
}


@pytest.mark.parametrize("kind", ["queue", "task"])
@pytest.mark.parametrize("lane", ["capped", "*"])  # the queue's own lane waits for a seat, "*" parks
def test_a_lane_claims_ahead_of_its_seats_and_starts_no_more_than_it_holds(
    settings, worker_thread, tmp_path, lane, kind
):
    queues, task_name, seats = CAPS[kind, 2]
    settings.JOBQ = {**settings.JOBQ, "QUEUES": queues, "CLAIM_AHEAD": 4}
    log = tmp_path / "occupy.log"
    ids = Job.objects.enqueue_many(
        NewJob(task_name, {"log": str(log), "seconds": 0.01}, queue="capped") for _ in range(60)
    )
    held = []
    worker_thread({lane: 6})

    def sample() -> bool:
        held.append(Job.objects.filter(queue="capped", status=JobStatus.RUNNING).count())
        return Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 60

    wait_until(sample, interval=0.005, message="every job done")
    assert peak(log) == (2, 60)
    assert max(held) > 2  # jobs claimed ahead of the seats, waiting in the lane without one
    wait_until(lambda: set(holders(seats).values()) == {None}, message="the idle worker freed its seats")


def test_a_stopping_star_lane_gives_back_the_jobs_it_parked_unstarted(settings, worker_thread, tmp_path):
    """A "*" lane stopped while it holds jobs of a capped queue claimed ahead (parked behind the one
    seat, or waiting): every job ends DONE, having run once, or PENDING with no attempt used."""
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_RUNNING": 1}}, "CLAIM_AHEAD": 4}
    log = tmp_path / "occupy.log"
    ids = Job.objects.enqueue_many(
        NewJob("test.occupy", {"log": str(log), "seconds": 0.005}, queue="capped") for _ in range(2000)
    )
    worker = worker_thread({"*": 4})
    wait_until(lambda: log.exists() and peak(log)[1] >= 50, message="some jobs to run")
    worker.stop()
    wait_until(worker.finished.is_set, message="the worker stopped")
    states = dict(Job.objects.filter(id__in=ids).values_list("id", "status"))
    done = {job_id for job_id, status in states.items() if status == JobStatus.DONE}
    started = [note.job_id for note in notes(log) if note.step > 0]
    assert sorted(started) == sorted(done) and len(done) < 2000
    assert set(states.values()) == {JobStatus.DONE, JobStatus.PENDING}
    assert not Job.objects.filter(id__in=ids, status=JobStatus.PENDING, attempts__gt=0).exists()
    assert peak(log)[0] == 1 and set(holders("capped").values()) == {None}


def test_a_short_retry_gives_up_its_seat_when_a_job_of_its_queue_waits_for_one(settings, worker_thread):
    """A queue capped at 1 in a lane of 2 slots: the lane claims no more than its one seat lets it
    run, so the other job waits in the database. The retry, due in 20 s, would wait in its slot and
    seat; the lane has no usable slot free and a due job waits, so the retry goes back to the queue
    instead and the other job runs now."""
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_RUNNING": 1}}, "SHORT_RETRY_SECONDS": 30,
                     "POLL_INTERVAL": 0.2}  # fmt: skip
    retried = Job.objects.enqueue("test.fails_once", priority=1, queue="capped")
    other = Job.objects.enqueue("test.noop", priority=2, queue="capped")
    worker_thread({"capped": 2})
    wait_until(lambda: Job.objects.filter(id=other, status=JobStatus.DONE).exists(), timeout=15,
               message="the other job ran before the 20 s retry")  # fmt: skip
    job = Job.objects.get(id=retried)
    assert (job.status, job.attempts, job.error_count) == (JobStatus.PENDING, 1, 1)


def test_a_stopped_worker_frees_its_seats(settings, worker_thread):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_RUNNING": 3}}}
    job = Job.objects.enqueue("test.sleep", {"seconds": 2}, queue="capped")  # running while seats are read
    worker = worker_thread({"capped": 2})
    wait_until(lambda: Job.objects.get(id=job).status == JobStatus.RUNNING, message="the run")
    assert sorted(h for h in holders("capped").values() if h) == [worker.worker_id] * 2
    worker.stop()
    wait_until(worker.finished.is_set, message="the worker stopped")
    assert set(holders("capped").values()) == {None}
    assert Job.objects.get(id=job).status == JobStatus.DONE


@pytest.mark.parametrize("kind", ["queue", "task"])
def test_a_worker_whose_seat_renewals_stop_starts_nothing_once_they_may_have_run_out(
    settings, worker_thread, tmp_path, kind
):
    """Worker A's heartbeat stops renewing its seat (its jobs' leases still renewed, its claims still
    answered): once the seat's last renewal is older than a lease less a heartbeat, A starts none of
    the jobs it claims; B takes the seat when its lease runs out. Never two bodies at once."""
    queues, task_name, _ = CAPS[kind, 1]
    settings.JOBQ = {**settings.JOBQ, "QUEUES": queues, "LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 1,
                     "POLL_INTERVAL": 0.2}  # fmt: skip
    log = tmp_path / "occupy.log"
    ids = Job.objects.enqueue_many(
        NewJob(task_name, {"log": str(log), "seconds": 0.01}, queue="capped") for _ in range(300)
    )
    a = worker_thread({"capped": 1}, worker_id="A")
    a._renew_seats = lambda lease: None
    wait_until(lambda: log.exists() and peak(log)[1] >= 5, message="A to run some jobs")
    worker_thread({"capped": 1}, worker_id="B")
    done = Job.objects.filter(id__in=ids, status=JobStatus.DONE)
    wait_until(lambda: done.count() == 300, timeout=60, message="every job done")
    a_starts = [n.at for n in notes(log) if n.worker_id == "A" and n.step > 0]
    b_starts = [n.at for n in notes(log) if n.worker_id == "B" and n.step > 0]
    assert peak(log) == (1, 300)
    assert a_starts and b_starts and max(a_starts) < min(b_starts)


@pytest.mark.serial  # cuts a worker's link: never beside other database tests
@pytest.mark.slow
@pytest.mark.p0
@pytest.mark.parametrize("kind", ["queue", "task"])
def test_a_worker_cut_off_starts_nothing_in_a_seat_another_worker_may_have_taken(
    settings, worker_thread, tmp_path, kind
):
    """Worker A runs a queue capped at 1 through a proxy that stops forwarding while A holds the seat
    and has jobs claimed ahead. A starts none once its last renewal is older than a lease less a
    heartbeat; worker B takes the seat once its lease ran out and runs the rest (A's claimed-ahead jobs
    once the reaper returns them). Never two bodies at once, every job done."""
    fast = {"JOBQ_LEASE_SECONDS": "3", "JOBQ_HEARTBEAT_SECONDS": "1", "JOBQ_POLL_INTERVAL": "0.2"}
    queues, task_name, _ = CAPS[kind, 1]
    settings.JOBQ = {**settings.JOBQ, "QUEUES": queues, "LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 1}
    log = tmp_path / "occupy.log"
    ids = Job.objects.enqueue_many(
        NewJob(task_name, {"log": str(log), "seconds": 0.02}, queue="capped") for _ in range(400)
    )
    db = connection.settings_dict
    target = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    with PausableProxy(target) as proxy:
        url = f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}"
        env = {**fast, "DATABASE_URL": url, "JOBQ_QUEUES": json.dumps(queues), "JOBQ_CLAIM_AHEAD": "8"}
        a = start_worker("--queues", "capped:1", "--worker-id", "A", env=env)
        try:
            wait_until(lambda: log.exists() and peak(log)[1] >= 20, message="A to run some jobs")
            proxy.pause()
            worker_thread({"capped": 1}, worker_id="B")
            done = Job.objects.filter(id__in=ids, status=JobStatus.DONE)
            # A statement cut in flight may hold its rows' locks until the server finds its client
            # gone (its TCP keepalives): end A's sessions as those would, so that nothing waits on it.
            end_sessions(proxy.upstream_ports())
            wait_until(lambda: Job.objects.reap() is None or done.count() == 400, timeout=120,
                       message="B to run the rest")  # fmt: skip
        finally:
            proxy.resume()
            a.terminate()
            a.wait(30)
    runs = notes(log)
    assert peak(log)[0] == 1
    a_starts = [n.at for n in runs if n.worker_id == "A" and n.step > 0]
    b_starts = [n.at for n in runs if n.worker_id == "B" and n.step > 0]
    assert len(a_starts) >= 20 and len(b_starts) >= 300 and max(a_starts) < min(b_starts), (
        len(a_starts), len(b_starts), min(b_starts) - max(a_starts),
    )  # fmt: skip


def test_a_job_under_a_queue_cap_and_a_task_cap_runs_only_within_both(settings, worker_thread, tmp_path):
    """Queue "capped" (MAX_RUNNING 3) holds jobs of a task capped at 2 and of an uncapped task: never
    more than 3 bodies of the queue at once, nor more than 2 of the task, in either lane kind."""
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"capped": {"MAX_RUNNING": 3}}, "CLAIM_AHEAD": 4}
    log = tmp_path / "occupy.log"
    jobs = [
        NewJob(task_name, {"log": str(log), "seconds": 0.01}, queue="capped")
        for _ in range(60)
        for task_name in ("test.capped_occupy", "test.occupy")
    ]
    ids = Job.objects.enqueue_many(jobs)
    capped = {job_id for job_id, job in zip(ids, jobs, strict=True) if job.task == "test.capped_occupy"}
    worker_thread({"capped": 4}, worker_id="own")
    worker_thread({"*": 4}, worker_id="star")
    done = Job.objects.filter(id__in=ids, status=JobStatus.DONE)
    wait_until(lambda: done.count() == 120, timeout=60, message="every job done")
    assert peak(log) == (3, 120)
    assert peak(log, only=capped) == (2, 60)
    wait_until(lambda: set(holders("capped").values()) | set(holders("task:test.capped_occupy").values()) == {None},
               message="the idle workers freed their seats")  # fmt: skip


@pytest.mark.parametrize("kind", ["queue", "task"])
def test_a_worker_waiting_for_seats_takes_them_when_another_frees_them_not_at_its_next_poll(
    settings, worker_thread, tmp_path, kind
):
    """Worker B's seat take found the cap's one seat held by A, so B waits for its poll (60 s here).
    A stops and frees its seat: the release wakes B, which takes it and runs the rest long before
    the poll."""
    queues, task_name, seats = CAPS[kind, 1]
    settings.JOBQ = {**settings.JOBQ, "QUEUES": queues, "POLL_INTERVAL": 60}
    log = tmp_path / "occupy.log"
    first = Job.objects.enqueue(task_name, {"log": str(log), "seconds": 1.0}, queue="capped")
    a = worker_thread({"capped": 1}, worker_id="A")
    wait_until(lambda: log.exists() and peak(log)[1] == 1, message="A to start its job")
    rest = Job.objects.enqueue_many(
        NewJob(task_name, {"log": str(log), "seconds": 0.01}, queue="capped") for _ in range(5)
    )
    worker_thread({"capped": 1}, worker_id="B")
    wait_until(lambda: any(h == "A" for h in holders(seats).values()), message="A holding the seat")
    a.stop()
    done = Job.objects.filter(id__in=[first, *rest], status=JobStatus.DONE)
    wait_until(lambda: done.count() == 6, timeout=30, message="B to run the rest, woken by A's release")
    starts = [n.worker_id for n in notes(log) if n.step > 0]
    assert sorted(starts) == ["A"] + ["B"] * 5 and peak(log)[0] == 1
