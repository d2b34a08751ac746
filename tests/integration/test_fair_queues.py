"""Fair queues (JOBQ["QUEUES"][q]["FAIR"], sql/postgres/fairness.py) on PostgreSQL: the key rows under
concurrent transactions, fairness with caps and rate limits, the fairness key on every enqueue path,
the options, and the busiest keys on every page that shows them. The claims themselves are checked
on both engines by tests/contract/test_fair_claims.py."""

import collections
import threading

import pytest
from django.db import connection, connections, transaction

from django_jobq.conf import jobq_settings
from django_jobq.exceptions import ConfigurationError, InvalidJob
from django_jobq.managers import NewJob
from django_jobq.models import Job
from tests.fair_queue import QUEUE, backlog, claimed_keys, key_rows, pending_keys

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def no_key_state():
    """jobq_fair_key is not a model: a flush between tests leaves its rows."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobq_fair_key")


def test_a_prune_never_deletes_the_key_of_an_uncommitted_job(fair):
    backlog("a", 1)
    Job.objects.claim_batch("w1", 1, queues=[QUEUE])  # "a" is idle now, its row still there
    entered, release = threading.Event(), threading.Event()

    def producer():
        try:
            with transaction.atomic():
                Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="a")
                entered.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=producer)
    thread.start()
    assert entered.wait(30)
    try:
        assert Job.objects.prune_fair_keys(100) == 0  # the producer's KEY SHARE lock: skipped
    finally:
        release.set()
        thread.join(30)
    assert key_rows() == pending_keys() == {(QUEUE, 100, "a")}


def test_an_open_enqueue_transaction_never_blocks_a_claim_of_its_key(fair):
    backlog("a", 3)
    entered, release = threading.Event(), threading.Event()

    def producer():
        try:
            with transaction.atomic():
                Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="a")
                entered.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=producer)
    thread.start()
    assert entered.wait(30)
    try:  # a claim that waited for the producer's transaction would fail on the lock timeout
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")
        _, jobs = Job.objects.complete_and_claim("w1", [], 2, QUEUE)
        assert len(jobs) == 2
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        release.set()
        thread.join(30)


def test_the_worker_cycle_claims_fairly_with_a_queue_cap(fair):
    fair(True, MAX_RUNNING=3)
    backlog("noisy", 50)
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="quiet")
    _, jobs = Job.objects.complete_and_claim("w1", [], 10, QUEUE)
    keys = Job.objects.filter(id__in=[j.id for j in jobs]).values_list("fairness_key", flat=True)
    assert len(jobs) == 3 and "quiet" in keys


@pytest.mark.parametrize(
    "key",
    ["a\x00b", "\ud800", "x" * 10_000, 42, "", "   "],
    ids=["nul", "surrogate", "huge", "int", "empty", "blank"],
)
def test_a_bad_fairness_key_is_refused_before_anything_is_written(fair, key):
    with pytest.raises(InvalidJob):
        Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key=key)
    with pytest.raises(InvalidJob):
        Job.objects.enqueue_many(
            [NewJob("test.noop", queue=QUEUE), NewJob("test.noop", queue=QUEUE, fairness_key=key)]
        )
    assert Job.objects.count() == 0 and key_rows() == set()


@pytest.mark.parametrize(
    "option",
    [
        "yes",
        {"WEIGHT": {}},
        {"WEIGHTS": {"a": 0}},
        {"WEIGHTS": {"a": float("nan")}},
        {"WEIGHTS": {"a": True}},
        {"WEIGHTS": {"a\x00": 1}},
        {"DEFAULT_WEIGHT": 10_000},
        {"WEIGHTS_FROM": "not a path"},
    ],
)
def test_a_bad_fair_option_is_a_configuration_error(fair, option):
    fair(option)
    with pytest.raises(ConfigurationError):
        jobq_settings()


def test_weights_from_a_callable_are_merged_over_the_mapping(fair):
    fair({"WEIGHTS": {"gold": 1}, "WEIGHTS_FROM": "tests.integration.test_fair_queues.plan_weights"})
    for key in ("bronze", "gold"):
        backlog(key, 100)
    assert collections.Counter(claimed_keys(30, limit=3)) == {"bronze": 10, "gold": 20}


def plan_weights(queue: str) -> dict[str, float]:
    assert queue == QUEUE
    return {"gold": 2}


def test_every_enqueue_path_writes_the_key(fair):
    from tests.testapp import dtasks, tasks

    direct = Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="direct")
    many = backlog("many", 3)  # one INSERT
    copied = backlog("copied", 150)  # binary COPY
    using = tasks.noop.using(queue=QUEUE, fairness_key="using").enqueue()
    result = dtasks.add.using(fairness_key="django").enqueue(1, 2)
    keys = dict(Job.objects.values_list("id", "fairness_key"))
    assert keys[direct] == "direct" and keys[using] == "using"
    assert {keys[i] for i in many} == {"many"} and {keys[i] for i in copied} == {"copied"}
    assert Job.objects.get(id=int(result.id)).fairness_key == "django"


def test_the_django_backend_refuses_a_bad_key_before_writing():
    from django_jobq.exceptions import JobqError
    from tests.testapp import dtasks

    with pytest.raises(JobqError):
        dtasks.add.using(fairness_key="a\x00").enqueue(1, 2)
    assert Job.objects.count() == 0


def test_a_batch_with_dependencies_refuses_fairness_keys(fair):
    first = Job.objects.enqueue("test.noop", queue=QUEUE)
    with pytest.raises(InvalidJob, match="fairness"):
        Job.objects.enqueue_many([NewJob("test.noop", queue=QUEUE, fairness_key="a", depends_on=[first])])
    assert Job.objects.count() == 1


def test_the_busiest_keys_are_shown_with_their_oldest_wait(fair, admin_client):
    import datetime as dt
    import io

    from django.core.management import call_command

    from django_jobq import dashboard
    from django_jobq.metrics.database import read_figures

    backlog("noisy", 30)
    backlog("calm", 3)
    Job.objects.filter(fairness_key="calm").update(run_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="later", delay=3600)  # not due: not shown
    snap = dashboard.snapshot()
    assert [(k.key, k.due, k.partial) for k in snap.fair] == [("noisy", 30, False), ("calm", 3, False)]
    assert snap.fair[1].wait > 3600 > snap.fair[0].wait
    out = io.StringIO()
    call_command("jobq_stats", stdout=out)
    assert "fair queue" in out.getvalue() and "noisy" in out.getvalue()
    families = {f.name: f for f in read_figures()}
    due = {tuple(s.labels.values()): s.value for s in families["jobq_fair_key_due_jobs"].samples}
    assert due == {(QUEUE, "noisy"): 30, (QUEUE, "calm"): 3}
    page = admin_client.get("/admin/django_jobq/job/dashboard/")
    assert page.status_code == 200 and b"jobq-fair-keys" in page.content and b"calm" in page.content


def test_task_caps_per_key_compose_with_fairness(fair):
    for tenant, key in (("t1", "c1"), ("t2", "c2")):
        Job.objects.enqueue_many(
            NewJob("test.capped_per_key", queue=QUEUE, fairness_key=tenant, concurrency_key=key)
            for _ in range(4)
        )
    _, jobs = Job.objects.complete_and_claim("w1", [], 4, QUEUE)
    rows = Job.objects.filter(id__in=[j.id for j in jobs])
    assert sorted(rows.values_list("fairness_key", "concurrency_key")) == [("t1", "c1"), ("t2", "c2")]


def test_a_rate_limited_fair_queue_takes_only_its_permits_and_shares_them(fair):
    fair(True, RATE_LIMIT="2/h")
    backlog("noisy", 20)
    Job.objects.enqueue("test.noop", queue=QUEUE, fairness_key="quiet")
    _, jobs = Job.objects.complete_and_claim("w1", [], 4, QUEUE, rations={QUEUE: 2})
    keys = sorted(Job.objects.filter(id__in=[j.id for j in jobs]).values_list("fairness_key", flat=True))
    assert keys == ["noisy", "quiet"]


def test_a_capped_fair_queue_with_capped_tasks_keeps_both_caps(fair):
    fair(True, MAX_RUNNING=1)
    for tenant in ("t1", "t2"):
        Job.objects.enqueue_many(
            NewJob("test.capped_per_key", queue=QUEUE, fairness_key=tenant, concurrency_key=tenant)
            for _ in range(3)
        )
    _, jobs = Job.objects.complete_and_claim("w1", [], 4, QUEUE)
    assert len(jobs) == 1
    _, more = Job.objects.complete_and_claim("w1", [], 4, QUEUE)
    assert more == []  # the queue's cap is reached


def test_jobs_enqueued_without_a_key_share_one_turn_of_the_round(fair):
    from django_jobq.workflows import chain
    from tests.testapp import tasks

    backlog("noisy", 500)
    alone = Job.objects.enqueue("test.noop", queue=QUEUE)
    many = Job.objects.enqueue_many([NewJob("test.noop", queue=QUEUE)])
    flow = chain(tasks.noop.using(queue=QUEUE).s(), tasks.noop.using(queue=QUEUE).s()).enqueue()
    unkeyed = {alone, *many, flow.job_ids[0]}
    assert set(Job.objects.filter(id__in=unkeyed).values_list("fairness_key", flat=True)) == {""}
    taken: list[int] = []
    for _ in range(6):  # the unkeyed jobs take one turn each round against the noisy key
        taken += [j.id for j in Job.objects.claim_batch("w1", 1, queues=[QUEUE])]
    assert unkeyed <= set(taken)


def test_an_unfair_queue_stores_no_key_for_jobs_without_one(fair):
    job = Job.objects.enqueue("test.noop", queue="elsewhere")
    assert Job.objects.get(id=job).fairness_key is None
