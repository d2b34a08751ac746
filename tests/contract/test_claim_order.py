"""Claim order and exclusivity with the walks of the claim index: lowest priority value first, then
run_at, then id, across every queue a claim names, over a mixture of due and future jobs; past the
bounded walks (many priority values, many queues); and under concurrent claimers."""

import datetime as dt
import random
import threading
from collections import Counter

import pytest
from django.db import close_old_connections
from django.utils import timezone

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.sql.postgres import jobs as postgres

pytestmark = [pytest.mark.contract, pytest.mark.p0, pytest.mark.django_db]

QUEUES = ("a", "b", "c")
PRIORITIES = (100, 0, 50, -5, 7)


def _mixture(seed: int = 7, jobs: int = 300) -> None:
    """Jobs over QUEUES and PRIORITIES; about a third wait in the future (delayed or backing off),
    the due ones have distinct run_ats in the past, some equal (the id decides)."""
    rng = random.Random(seed)
    now = timezone.now()
    batch = []
    for i in range(jobs):
        future = rng.random() < 0.35
        offset = dt.timedelta(seconds=rng.randint(1, 3600))
        run_at = now + offset if future else now - offset
        if not future and i % 10 == 0:
            run_at = now - dt.timedelta(hours=2)  # ties on run_at
        batch.append(
            NewJob(
                "test.noop",
                {"i": i},
                queue=rng.choice(QUEUES),
                priority=rng.choice(PRIORITIES),
                run_at=run_at,
            )
        )
    Job.objects.enqueue_many(batch)


def _due_in_order(queues) -> list[int]:
    due = Job.objects.filter(status=JobStatus.PENDING, run_at__lte=timezone.now())
    if queues is not None:
        due = due.filter(queue__in=queues)
    return list(due.order_by("priority", "run_at", "id").values_list("id", flat=True))


SPECS = [["a"], ["a", "b"], ["c", "a", "a"], None]


@pytest.mark.parametrize("queues", SPECS, ids=["one", "two", "two-repeated", "all"])
def test_single_claims_follow_priority_then_run_at_then_id(queues):
    _mixture()
    expected = _due_in_order(queues)
    assert len(expected) > 40
    got = []
    while job := Job.objects.claim("w", queues=queues):
        got.append(job.id)
    assert got == expected
    # the future jobs are all still waiting
    waiting = Job.objects.filter(status=JobStatus.PENDING)
    if queues is not None:
        waiting = waiting.filter(queue__in=queues)
    assert all(run_at > timezone.now() for run_at in waiting.values_list("run_at", flat=True))


@pytest.mark.parametrize("queues", SPECS, ids=["one", "two", "two-repeated", "all"])
def test_batches_take_the_next_jobs_in_order(queues):
    _mixture(seed=11)
    expected = _due_in_order(queues)
    position = 0
    while batch := Job.objects.claim_batch("w", 7, queues=queues):
        assert len(batch) <= 7
        assert {job.id for job in batch} == set(expected[position : position + len(batch)])
        position += len(batch)
    assert position == len(expected)


def test_complete_and_claim_follows_the_order():
    _mixture(seed=5)
    expected = _due_in_order(["b"])
    got = []
    while True:
        _, jobs = Job.objects.complete_and_claim("w", [], 3, "b")
        if not jobs:
            break
        got.extend(sorted(jobs, key=lambda j: (j.priority, j.run_at, j.id)))
    assert [j.id for j in got] == expected


def test_order_holds_past_the_bounded_priority_walk():
    """More distinct priority values than the walk visits one by one, the lowest ones only waiting:
    the due jobs behind them are still found, in order."""
    now = timezone.now()
    values = range(postgres._WALK + 8)
    jobs = [NewJob("test.noop", queue="q", priority=p, run_at=now + dt.timedelta(hours=1)) for p in values]
    for p in (3, postgres._WALK + 1, postgres._WALK + 3, postgres._WALK + 7):
        jobs += [
            NewJob("test.noop", queue="q", priority=p, run_at=now - dt.timedelta(seconds=s)) for s in (5, 9)
        ]
    Job.objects.enqueue_many(jobs)
    expected = _due_in_order(["q"])
    assert len(expected) == 8
    for queues in (["q"], ["q", "other"], None):
        got = [job.id for job in Job.objects.claim_batch("w", 100, queues=queues)]
        assert sorted(got) == sorted(expected)
        Job.objects.filter(id__in=got).update(status=JobStatus.PENDING)
    got = []
    while job := Job.objects.claim("w", queues=["q"]):
        got.append(job.id)
    assert got == expected


def test_every_queue_is_served_past_the_bounded_queue_walk():
    """More queues than the walk visits one by one: every due job is claimed, exactly once; the waiting
    ones are not."""
    now = timezone.now()
    jobs = []
    for n in range(postgres._WALK + 10):
        jobs.append(
            NewJob("test.noop", queue=f"q{n:03}", priority=n % 4, run_at=now - dt.timedelta(seconds=n))
        )
        jobs.append(NewJob("test.noop", queue=f"q{n:03}", priority=-1, run_at=now + dt.timedelta(hours=1)))
    Job.objects.enqueue_many(jobs)
    expected = set(_due_in_order(None))
    got = []
    while job := Job.objects.claim("w"):
        got.append(job.id)
    assert len(got) == len(set(got)) and set(got) == expected
    # the strict order holds among the queues the walk visits
    walked = [f"q{n:03}" for n in range(postgres._WALK - 1)]
    Job.objects.filter(status=JobStatus.RUNNING).update(status=JobStatus.PENDING)
    expected = _due_in_order(walked)
    got = []
    while job := Job.objects.claim("w", queues=walked):
        got.append(job.id)
    assert got == expected


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_over_mixed_queues_never_share_a_job():
    _mixture(seed=3, jobs=600)
    due = set(_due_in_order(None))
    future = set(Job.objects.filter(status=JobStatus.PENDING).values_list("id", flat=True)) - due
    threads, barrier = 8, threading.Barrier(8)
    results: list[list[int]] = [[] for _ in range(threads)]
    specs = [None, ["a"], ["b"], ["a", "b"], ["c", "b"], ["a", "b", "c"]]

    def claim(i: int) -> None:
        rng = random.Random(i)
        try:
            barrier.wait()
            while True:
                queues = rng.choice(specs)
                jobs = Job.objects.claim_batch(f"w{i}", rng.randint(1, 4), queues=queues)
                results[i].extend(job.id for job in jobs)
                if not jobs and queues is None:
                    return  # nothing this claimer could lock, in any queue
        finally:
            close_old_connections()

    workers = [threading.Thread(target=claim, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    claimed = Counter(job_id for ids in results for job_id in ids)
    assert max(claimed.values()) == 1  # never twice
    assert set(claimed) == due  # every due job, no waiting one
    assert not set(claimed) & future
    assert sum(1 for ids in results if ids) >= 2  # the claimers really raced
    assert Job.objects.filter(status=JobStatus.RUNNING).count() == len(due)
    assert set(Job.objects.filter(status=JobStatus.RUNNING).values_list("attempts", flat=True)) == {1}
