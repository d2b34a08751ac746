"""Fair queues under chaos: worker processes SIGKILLed at random every two seconds while they drain a
fair queue (one noisy key, many quiet ones). No job is lost, a job runs again only after a kill, and
the per-key state (jobq_fair_key) never
misses a key with PENDING jobs: checked in one statement throughout, and equal to the rows at the end."""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict

import pytest
from django.db import connection

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.testapp.models import Ledger

from .support import Processes, read, report, seeded

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

QUEUE = "tenants"
WORKERS, SLOTS = 3, 4
NOISY, QUIET_KEYS, QUIET_JOBS = 2000, 30, 20
KILL_EVERY, REAP_INTERVAL = 2.0, 0.5
ENV = {
    "JOBQ_LEASE_SECONDS": "3",
    "JOBQ_HEARTBEAT_SECONDS": "0.5",
    "JOBQ_POLL_INTERVAL": "0.2",
    "JOBQ_QUEUES": json.dumps({QUEUE: {"FAIR": True}}),
}
# Keys with PENDING jobs that have no jobq_fair_key row: read in one statement (one snapshot).
MISSING_KEYS = """
SELECT count(*) FROM (
    SELECT DISTINCT queue, priority, fairness_key FROM jobq_job WHERE status = 0 AND fairness_key IS NOT NULL
) AS p
WHERE NOT EXISTS (
    SELECT 1 FROM jobq_fair_key AS f WHERE f.queue = p.queue AND f.priority = p.priority AND f.key = p.fairness_key)
"""


def _missing_keys() -> int:
    with connection.cursor() as cursor:
        cursor.execute(MISSING_KEYS)
        return cursor.fetchone()[0]


def _done() -> int:
    return Job.objects.filter(status=JobStatus.DONE).count()


@pytest.fixture(autouse=True)
def no_key_state():
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobq_fair_key")


def test_kills_mid_drain_lose_nothing_keep_the_rounds_and_the_key_state(processes: Processes):
    rng = seeded()
    noisy = Job.objects.enqueue_many(
        NewJob("test.ledger", {"ms": rng.randint(5, 30)}, queue=QUEUE, fairness_key="noisy")
        for _ in range(NOISY)
    )
    quiet = Job.objects.enqueue_many(
        NewJob("test.ledger", {"ms": rng.randint(5, 30)}, queue=QUEUE, fairness_key=f"quiet-{k}")
        for k in range(QUIET_KEYS)
        for _ in range(QUIET_JOBS)
    )
    total = len(noisy) + len(quiet)
    processes.env = ENV
    processes.start("reaper", "jobq_reap", "--interval", str(REAP_INTERVAL))
    generation = dict.fromkeys(range(WORKERS), 0)
    kills: dict[str, float] = {}

    def name(slot: int) -> str:
        return f"fair{slot}-{generation[slot]}"

    for slot in range(WORKERS):
        processes.worker(name(slot), "--concurrency", str(SLOTS), "--queues", QUEUE)
    missing, checks, finished = 0, 0, None
    next_kill = time.monotonic() + KILL_EVERY
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.1)
        missing += read(_missing_keys)
        checks += 1
        if read(_done) == total:
            finished = time.time()
            break
        if time.monotonic() >= next_kill:
            slot = rng.randrange(WORKERS)
            kills[name(slot)] = time.time()
            processes.kill(name(slot))
            generation[slot] += 1
            processes.worker(name(slot), "--concurrency", str(SLOTS), "--queues", QUEUE)
            next_kill += KILL_EVERY
    processes.stop_all()
    assert finished is not None, f"only {read(_done)} of {total} jobs DONE after 300 s"

    runs: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for row in Ledger.objects.order_by("job_id", "fence"):
        runs[row.job_id].append((row.fence, row.worker_id))
    unexplained = [
        job_id
        for job_id, rs in runs.items()
        for (_, earlier), _later in itertools.pairwise(rs)
        if earlier not in kills
    ]
    # The quiet keys' jobs started within the first rounds: the noisy jobs started before the last
    # quiet one are about one per round (QUIET_JOBS rounds), not the noisy backlog (FIFO: all of it).
    last_quiet = max(Job.objects.filter(id__in=quiet).values_list("started_at", flat=True))
    noisy_before = Job.objects.filter(id__in=noisy, started_at__lt=last_quiet).count()
    Job.objects.prune_fair_keys(10_000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobq_fair_key")
        left = cursor.fetchone()[0]
    report(
        "fair_chaos", seed=rng.seed_value, jobs=total, kills=len(kills), checks=checks,
        run_more_than_once=sum(1 for rs in runs.values() if len(rs) > 1),
        noisy_started_before_last_quiet=noisy_before,
    )  # fmt: skip
    assert Job.objects.filter(status=JobStatus.DONE).count() == total  # nothing lost
    assert set(runs) == set(noisy) | set(quiet)  # every job ran ...
    assert unexplained == []  # ... and ran again only after the worker of its earlier run was killed
    assert missing == 0  # every PENDING job's key had its row, at every check
    assert left == 0  # and the state equals the rows at the end: no key without PENDING jobs is left
    # noisy_before is reported, not asserted: a quiet job held by a killed worker waits for its lease
    # (3 s) while the noisy key runs on, so the figure measures the kills as much as the rounds (the
    # rounds themselves are asserted claim by claim in tests/contract/test_fair_claims.py).
