"""Fair claims (JOBQ["QUEUES"][q]["FAIR"]; sql/postgres/fairness.py, sql/sqlite/fairness.py) on both
engines: keys served round-robin by virtual time, weighted, priority first, a new key joining the
round, jobs without a key still taken, the per-key rows kept by the triggers and pruned, and the
busiest keys shown."""

import collections
import datetime as dt

import pytest
from django.db import connection

from django_jobq.models import Job, JobStatus
from tests.fair_queue import QUEUE, backlog, claimed_keys, key_rows, keys_of, pending_keys

pytestmark = [pytest.mark.contract, pytest.mark.django_db]


def test_a_quiet_key_waits_at_most_one_round_behind_a_noisy_one(fair):
    backlog("noisy", 2000)
    quiet = [Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key=f"quiet-{n}") for n in range(5)]
    assert sorted(claimed_keys(6)) == ["noisy", *(f"quiet-{n}" for n in range(5))]
    assert set(Job.objects.filter(id__in=quiet).values_list("status", flat=True)) == {JobStatus.RUNNING}


def test_an_unfair_queue_serves_the_same_backlog_in_order(settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {}}
    backlog("noisy", 50)
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="quiet")
    assert set(claimed_keys(50)) == {"noisy"}  # the control: without FAIR the quiet job waits its turn


def test_weights_share_the_starts_in_proportion(fair):
    fair({"WEIGHTS": {"gold": 4, "silver": 2}, "DEFAULT_WEIGHT": 1})
    for key in ("bronze", "silver", "gold"):
        backlog(key, 200)
    assert collections.Counter(claimed_keys(140, limit=4)) == {"bronze": 20, "silver": 40, "gold": 80}


def test_a_batch_claim_takes_from_every_key_with_due_jobs(fair):
    for key in "abcd":
        backlog(key, 10)
    jobs = Job.objects.claim_batch("w1", 8, queues=[QUEUE])
    assert collections.Counter(keys_of(jobs)) == {"a": 2, "b": 2, "c": 2, "d": 2}


def test_one_key_alone_fills_the_whole_claim(fair):
    backlog("only", 20)
    assert len(Job.objects.claim_batch("w1", 8, queues=[QUEUE])) == 8


def test_priority_comes_before_fairness(fair):
    backlog("noisy", 20, priority=100)
    urgent = Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="other", priority=0)
    assert Job.objects.claim_batch("w1", 1, queues=[QUEUE])[0].id == urgent


def test_a_new_key_joins_the_round_instead_of_owning_it(fair):
    backlog("old", 100)
    claimed_keys(50)  # "old" has run 50 jobs: its virtual time is 50
    backlog("new", 100)
    assert collections.Counter(claimed_keys(20)) == {"old": 10, "new": 10}


def test_jobs_without_a_key_in_a_fair_queue_still_run(fair):
    plain = [Job.objects.enqueue("test.noop", queue=QUEUE) for _ in range(3)]
    backlog("keyed", 2)
    taken = {j.id for j in Job.objects.claim_batch("w1", 10, queues=[QUEUE])}
    taken |= {j.id for j in Job.objects.claim_batch("w1", 10, queues=[QUEUE])}
    assert set(plain) <= taken and len(taken) == 5


def test_a_future_job_is_not_claimed_early(fair):
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="later", delay=dt.timedelta(hours=1))
    assert Job.objects.claim_batch("w1", 4, queues=[QUEUE]) == []


def test_the_worker_cycle_completes_and_claims_fairly(fair):
    backlog("noisy", 50)
    first = Job.objects.claim_batch("w1", 1, queues=[QUEUE])[0]
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="quiet")
    written, jobs = Job.objects.complete_and_claim("w1", [(first.id, first.fence, "1")], 2, QUEUE)
    assert written.done == {first.id} and Job.objects.get(id=first.id).status == JobStatus.DONE
    assert sorted(keys_of(jobs)) == ["noisy", "quiet"]


def test_the_star_lane_serves_a_fair_queue_fairly(fair):
    backlog("noisy", 50)
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="quiet")
    Job.objects.enqueue("test.noop", queue="plain")
    _, jobs = Job.objects.complete_and_claim("w1", [], 3, None)
    rows = Job.objects.filter(id__in=[j.id for j in jobs])
    assert sorted(rows.values_list("queue", "fairness_key")) == sorted(
        [("plain", None), (QUEUE, "noisy"), (QUEUE, "quiet")]
    )


def test_every_path_that_makes_a_job_pending_keeps_its_key_row(fair):
    ids = backlog("a", 3) + backlog("b", 2, priority=5)
    assert key_rows() == pending_keys() == {(QUEUE, 100, "a"), (QUEUE, 5, "b")}
    job = Job.objects.claim_batch("w1", 1, queues=[QUEUE])[0]  # b's, priority 5
    Job.objects.cancel(ids[3] if job.id == ids[4] else ids[4])
    assert Job.objects.prune_fair_keys(100) == 1  # b has nothing PENDING left
    assert key_rows() == pending_keys() == {(QUEUE, 100, "a")}
    Job.objects.fail(job.id, "w1", "boom", fence=job.fence, backoff_seconds=0)  # a retry: PENDING again
    assert key_rows() == pending_keys() == {(QUEUE, 100, "a"), (QUEUE, 5, "b")}
    Job.objects.filter(id=ids[0]).update(priority=7)  # a lane of its own: its key's row follows
    assert key_rows() == {(QUEUE, 100, "a"), (QUEUE, 7, "a"), (QUEUE, 5, "b")}
    assert Job.objects.prune_fair_keys(100) == 0  # every row has a PENDING job


def test_the_busiest_keys_are_shown_with_their_oldest_wait(fair):
    from django.utils import timezone

    from django_jobq.dashboard.fairness import fair_keys

    backlog("noisy", 30)
    backlog("calm", 3)
    Job.objects.filter(fairness_key="calm").update(run_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="later", delay=3600)  # not due: not shown
    found = fair_keys(connection, timezone.now())
    assert [(k.queue, k.key, k.due, k.partial) for k in found] == [
        (QUEUE, "noisy", 30, False),
        (QUEUE, "calm", 3, False),
    ]
    assert found[1].wait > 3600 > found[0].wait


@pytest.mark.django_db(transaction=True)
def test_racing_fair_claims_take_each_job_once_and_charge_each_key_for_exactly_its_jobs(fair):
    from tests.contract.racing import race

    try:
        for key in "abcde":
            backlog(key, 20)

        def drain(i: int) -> list[int]:
            mine: list[int] = []
            while jobs := Job.objects.claim_batch(f"thread-{i}", 3, queues=[QUEUE]):
                mine += [j.id for j in jobs]
            return mine

        taken = [job_id for ids in race(4, drain) for job_id in ids]
        assert len(taken) == 100 and len(set(taken)) == 100
        with connection.cursor() as cursor:
            cursor.execute("SELECT key, vtime FROM jobq_fair_key WHERE queue = %s", [QUEUE])
            assert sorted(cursor.fetchall()) == [(key, 20.0) for key in "abcde"]
    finally:
        with connection.cursor() as cursor:  # not a model: the flush after this test leaves its rows
            cursor.execute("DELETE FROM jobq_fair_key")
