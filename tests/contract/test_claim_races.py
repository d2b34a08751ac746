"""Exclusive claim under real concurrency: OS processes and threads against one PostgreSQL."""

import json
import subprocess
from collections import Counter

import pytest

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import run_module
from tests.contract.racing import race

pytestmark = [pytest.mark.contract, pytest.mark.p0, pytest.mark.django_db(transaction=True)]


@pytest.mark.slow
@pytest.mark.postgresql("processes on one SQLite file take turns at its one write lock; threads race below")
def test_processes_drain_every_job_exactly_once():
    total, batch = 600, 7
    ids = Job.objects.enqueue_many(NewJob("test.noop", {"i": i}) for i in range(total))
    assert len(ids) == total
    procs = [
        run_module(
            "tests.procs.claimer", f"proc-{n}", str(batch), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for n in range(4)
    ]
    for p in procs:  # every process connected before any starts: a slow start never leaves one alone
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    claimed = Counter(job_id for out in outputs for job_id in out["claimed"])
    assert set(claimed) == set(ids)  # every job was claimed ...
    assert max(claimed.values()) == 1  # ... by exactly one process
    assert all(out["max_batch"] <= batch for out in outputs)
    assert sum(1 for out in outputs if out["claimed"]) >= 2  # the processes really raced
    assert Job.objects.counts() == {
        "PENDING": 0,
        "RUNNING": 0,
        "DONE": total,
        "DEAD": 0,
        "CANCELLED": 0,
        "WAITING": 0,
    }
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}


def test_threads_racing_on_claim_never_share_a_job():
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(40))

    def drain(i: int) -> list[int]:
        mine = []
        while job := Job.objects.claim(f"thread-{i}"):
            mine.append(job.id)
        return mine

    results = race(8, drain)
    everything = [job_id for ids in results for job_id in ids]
    assert len(everything) == 40 and len(set(everything)) == 40


def test_batch_claim_never_exceeds_its_limit_under_concurrency():
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(200))

    def claim_batches(i: int) -> list[int]:
        sizes = []
        while jobs := Job.objects.claim_batch(f"batcher-{i}", 3):
            sizes.append(len(jobs))
        return sizes

    sizes = [size for per_thread in race(8, claim_batches) for size in per_thread]
    assert max(sizes) <= 3
    assert sum(sizes) == 200
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == 200


def test_same_dedupe_key_from_eight_threads_makes_one_job():
    results = race(8, lambda i: Job.objects.enqueue("test.echo", {"from": i}, dedupe_key="one-only"))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert Job.objects.filter(dedupe_key="one-only").count() == 1
    assert Job.objects.get(dedupe_key="one-only").id == winners[0]
