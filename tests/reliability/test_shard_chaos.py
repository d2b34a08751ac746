"""Chaos on three shards (the home database and two servers of their own, tests/servers/shards.py):
8 producer processes enqueue through the outbox in transactions that commit or roll back at random,
4 worker processes (each serving the three databases) are SIGKILLed every few seconds, and one
shard's server stops for 20 s mid-drain. At the end every committed job ran and is DONE on its
database, no rolled-back job exists or ran, every second run of a job is explained by a kill or by
its shard's stop, the other databases drained while the one was down (measured), and the outbox is
empty."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections import defaultdict

import pytest
from django.db import connections

from django_jobq import shards
from django_jobq.models import Job, JobStatus, OutboxEntry
from tests.testapp.models import Ledger

from .support import report, seeded

pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.slow]

JOBS = int(os.environ.get("JOBQ_SHARD_CHAOS_JOBS", "30000"))  # committed jobs, all producers together
PRODUCERS, WORKERS, SLOTS = 8, 4, 4
LEASE, HEARTBEAT, POLL, REAP_INTERVAL = 3.0, 0.5, 0.2, 0.5
KILL_EVERY, DOWN_SECONDS = 3.0, 20.0
QUEUES = ("default", "reports", "archive")  # on default, jobs2 and jobs3
SLACK = 0.5  # seconds, between this process's clock and a database's


def _done(alias: str) -> int:
    return Job.objects.using(alias).filter(status=JobStatus.DONE).count()


@pytest.mark.django_db(transaction=True, databases=["default", "jobs2", "jobs3"])
def test_shard_chaos_loses_nothing_runs_nothing_rolled_back_and_drains_around_a_down_shard(
    placed, processes, tmp_path
):
    servers = placed
    rng = seeded()
    processes.env = {
        "JOBQ_LEASE_SECONDS": str(LEASE), "JOBQ_HEARTBEAT_SECONDS": str(HEARTBEAT),
        "JOBQ_POLL_INTERVAL": str(POLL),
        "JOBQ_TEST_SHARDS": json.dumps({a: [n, servers[a].port] for a, n in (("jobs2", 1), ("jobs3", 2))}),
        "JOBQ_QUEUES": json.dumps({"reports": {"DATABASE": "jobs2"}, "archive": {"DATABASE": "jobs3"}}),
    }  # fmt: skip
    generation = dict.fromkeys(range(WORKERS), 0)
    kills: dict[str, float] = {}

    def name(slot: int) -> str:
        return f"shard{slot}-{generation[slot]}"

    processes.start("reaper", "jobq_reap", "--interval", str(REAP_INTERVAL))
    for slot in range(WORKERS):
        processes.worker(name(slot), "--queues", f"*:{SLOTS}")
    outs = [tmp_path / f"producer{n}.txt" for n in range(PRODUCERS)]
    for n, out in enumerate(outs):
        share = JOBS // PRODUCERS + (1 if n < JOBS % PRODUCERS else 0)
        processes.start(
            f"producer{n}", str(out), str(share), str(rng.randrange(1 << 30)), ",".join(QUEUES),
            module="tests.procs.shard_producer",
        )  # fmt: skip
    began = time.time()
    down: tuple[float, float] | None = None
    drained_while_down: dict[str, int] = {}
    next_kill = time.monotonic() + KILL_EVERY
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if time.monotonic() >= next_kill:
            slot = rng.randrange(WORKERS)
            kills[name(slot)] = time.time()
            processes.kill(name(slot))
            generation[slot] += 1
            processes.worker(name(slot), "--queues", f"*:{SLOTS}")
            next_kill = time.monotonic() + KILL_EVERY
        done = sum(_done(alias) for alias in ("default", "jobs2"))
        if down is None and done >= JOBS * 2 // 9:  # about a third of the two other databases' share
            before = {alias: _done(alias) for alias in ("default", "jobs2")}
            stopped = time.time()
            servers["jobs3"].stop("fast")
            time.sleep(DOWN_SECONDS)
            drained_while_down = {alias: _done(alias) - before[alias] for alias in before}
            servers["jobs3"].start()
            connections["jobs3"].close()
            down = (stopped, time.time())
        producing = any(processes.running[f"producer{n}"].poll() is None for n in range(PRODUCERS))
        finished = sum(_done(alias) for alias in ("default", "jobs2", "jobs3")) >= JOBS
        if down is not None and not producing and finished and not OutboxEntry.objects.exists():
            break
    elapsed = time.time() - began
    for n in range(PRODUCERS):
        assert processes.stop(f"producer{n}") == 0, processes.log(f"producer{n}")
    processes.stop_all()

    committed: list[int] = []
    rolled_back: list[int] = []
    for out in outs:
        for line in out.read_text().splitlines():
            kind, *ids = line.split()
            (committed if kind == "C" else rolled_back).extend(map(int, ids))
    assert len(committed) == JOBS and down is not None
    by_database: dict[str, list[int]] = defaultdict(list)
    for job_id in committed:
        by_database[shards.database_of_job(job_id)].append(job_id)
    for alias, ids in by_database.items():  # every committed job ran, once DONE, on its database
        statuses = dict(Job.objects.using(alias).filter(id__in=ids).values_list("id", "status"))
        assert len(statuses) == len(ids), f"{len(ids) - len(statuses)} committed job(s) missing on {alias}"
        assert set(statuses.values()) == {JobStatus.DONE}, alias
    for alias in ("default", "jobs2", "jobs3"):  # no rolled-back job was written, nor ran
        assert not Job.objects.using(alias).filter(id__in=rolled_back).exists(), alias
    runs: dict[int, list[tuple[float, str]]] = defaultdict(list)
    for job_id, worker, at in Ledger.objects.values_list("job_id", "worker_id", "at"):
        runs[job_id].append((at.timestamp(), worker))
    assert set(runs) == set(committed)
    unexplained = []
    repeats = 0
    for job_id, job_runs in runs.items():
        job_runs.sort()
        for at, worker in job_runs[:-1]:  # each run but the last was followed by another
            repeats += 1
            killed = worker in kills and kills[worker] >= at - SLACK
            stopped = shards.database_of_job(job_id) == "jobs3" and down[0] - SLACK <= at <= down[1] + SLACK
            if not (killed or stopped):
                unexplained.append((job_id, worker, at))
    assert not unexplained, unexplained[:10]
    assert all(drained_while_down.values()), drained_while_down  # the others drained meanwhile
    assert not OutboxEntry.objects.exists()
    report(
        "shard_chaos", seed=rng.seed_value, jobs=JOBS, rolled_back=len(rolled_back), runs=sum(map(len, runs.values())),
        repeats=repeats, kills=len(kills), down_seconds=round(down[1] - down[0], 1),
        drained_while_down=drained_while_down, per_database={a: len(i) for a, i in by_database.items()},
        seconds=round(elapsed, 1), at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )  # fmt: skip
