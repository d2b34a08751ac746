"""Chaos on a capped queue and a capped task: worker processes of both lane kinds (the queue's own lane,
which waits for a seat, and "*" lanes, which park) SIGKILLed at random and restarted at once, while they
drain a backlog of short jobs under a queue cap of 3, beside jobs of a task capped at 2 in another queue
(a kill each time 70 more jobs are done, so the kills do not depend on the machine's speed). A killed
worker's bodies die with it, so the caps hold strictly: never more than 3 (2) bodies at once (a killed
body counted as running until its kill). Nothing is lost, and a job runs again only after the worker of
its earlier run was killed."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.occupancy import notes, peak, unfinished

from .support import Processes, read, report, seeded

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

CAP, JOBS = 3, 800
TASK_CAP, TASK_JOBS = 2, 200  # test.capped_occupy's max_running, in queue "other"
LANES = ("capped:4", "*:4", "capped:2,other:2", "*:3")
KILL_EVERY_DONE, REAP_INTERVAL = 70, 0.5
ENV = {
    "JOBQ_LEASE_SECONDS": "4",  # a worker starts nothing in a seat renewed more than 3 s ago: a
    "JOBQ_HEARTBEAT_SECONDS": "1",  # second's margin for a body already running, on a loaded machine
    "JOBQ_POLL_INTERVAL": "0.2",
    "JOBQ_QUEUES": json.dumps({"capped": {"MAX_RUNNING": CAP}}),
}


def _done() -> int:
    return Job.objects.filter(status=JobStatus.DONE).count()


def test_kills_mid_drain_never_let_more_than_the_cap_run_and_lose_nothing(processes: Processes, tmp_path):
    rng = seeded()
    log = tmp_path / "occupy.log"
    capped = Job.objects.enqueue_many(
        NewJob("test.occupy", {"log": str(log), "seconds": rng.uniform(0.005, 0.05)}, queue="capped")
        for _ in range(JOBS)
    )
    task_log = tmp_path / "task.log"
    others = Job.objects.enqueue_many(
        NewJob(
            "test.capped_occupy", {"log": str(task_log), "seconds": rng.uniform(0.005, 0.03)}, queue="other"
        )
        for _ in range(TASK_JOBS)
    )
    processes.env = ENV
    processes.start("reaper", "jobq_reap", "--interval", str(REAP_INTERVAL))
    generation = dict.fromkeys(range(len(LANES)), 0)
    kills: dict[str, float] = {}  # worker id -> CLOCK_MONOTONIC of its kill

    def name(slot: int) -> str:
        return f"seat{slot}-{generation[slot]}"

    for slot, lanes in enumerate(LANES):
        processes.worker(name(slot), "--queues", lanes)
    total, finished = JOBS + len(others), False
    next_kill = KILL_EVERY_DONE
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        time.sleep(0.1)
        done = read(_done)
        if done == total:
            finished = True
            break
        if done >= next_kill:
            slot = rng.randrange(len(LANES))
            processes.kill(name(slot))
            kills[name(slot)] = time.monotonic()  # after the process is gone: no body of it ends later
            generation[slot] += 1
            processes.worker(name(slot), "--queues", LANES[slot])
            next_kill = done + KILL_EVERY_DONE
    processes.stop_all()
    assert finished, f"only {read(_done)} of {total} jobs DONE after 240 s"

    most, task_most = peak(log, kills)[0], peak(task_log, kills)[0]
    starts: dict[int, list[str]] = defaultdict(list)
    for note in (*notes(log), *notes(task_log)):
        if note.step > 0:
            starts[note.job_id].append(note.worker_id)
    unexplained = [job_id for job_id, ws in starts.items() for earlier in ws[:-1] if earlier not in kills]
    cut_short = unfinished(log) + unfinished(task_log)
    report(
        "seat_chaos", seed=rng.seed_value, jobs=JOBS + TASK_JOBS, kills=len(kills), peak=most, task_peak=task_most,
        cut_short=sum(cut_short.values()), run_more_than_once=sum(1 for ws in starts.values() if len(ws) > 1),
    )  # fmt: skip
    assert len(kills) >= 8
    assert set(starts) == {*capped, *others}  # every job ran ...
    assert unexplained == []  # ... and ran again only after the worker of its earlier run was killed
    assert (most, task_most) == (CAP, TASK_CAP)  # the caps were used, and never exceeded
    assert not [worker for _, worker in cut_short if worker not in kills]  # only kills cut bodies short
