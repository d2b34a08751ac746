"""Queues spread over several databases (JOBQ["QUEUES"][q]["DATABASES"], django_jobq.shards), against
two real servers of their own beside the test database (tests/servers/shards.py): each job placed by
its shard key (dedupe key, concurrency key, shard_key=) on one database, always the same one; jobs
without a key spread, or joining the open transaction; enqueue_many writing each database's jobs in
one statement; workflows on one database; a lane serving every database of its queue; queue-wide
calls reaching every database; and refusals before anything is written."""

from __future__ import annotations

import io
import threading
from collections import Counter

import pytest
from django.core.management import call_command
from django.db import OperationalError, connections, transaction

from django_jobq import shards
from django_jobq.conf import jobq_settings
from django_jobq.exceptions import (
    ConfigurationError,
    ForeignTransaction,
    InvalidJob,
    PartlyWritten,
    QueueFull,
    SpansDatabases,
)
from django_jobq.managers.graphs import GraphNode
from django_jobq.managers.producing import NewJob
from django_jobq.models import Job, JobStatus, OutboxEntry, QueueState
from django_jobq.worker import Worker
from django_jobq.worker.group import WorkerGroup
from django_jobq.worker.lanes import lanes_by_database
from tests.servers.shards import SHARDS
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration]
ALIASES = ["default", *SHARDS]


def where(job_ids: list[int]) -> Counter[str]:
    """How many of ``job_ids`` each database holds (read from the databases, not from the ids)."""
    return Counter(
        alias for alias in ALIASES for _ in Job.objects.using(alias).filter(id__in=job_ids).values("id")
    )


def total() -> int:
    return sum(Job.objects.using(alias).count() for alias in ALIASES)


# -- settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queue", "message"),
    [
        ({"DATABASES": ["jobs2"]}, "a list of 2 to 64"),
        ({"DATABASES": "jobs2,jobs3"}, "a list of 2 to 64"),
        ({"DATABASES": ["jobs2", "jobs2"]}, "distinct aliases"),
        ({"DATABASES": ["jobs2", ""]}, "distinct aliases"),
        ({"DATABASES": ["jobs2", "jobs3"], "DATABASE": "jobs2"}, "not both"),
        ({"DATABASES": ["jobs2", "jobs3"], "MAX_DEPTH": 40}, 'no "MAX_DEPTH"'),
        ({"DATABASES": ["jobs2", "x'; drop table jobq_job; --"]}, "neither"),
    ],
)
def test_bad_spread_settings_are_refused(spread, settings, queue, message):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"bad": queue}}
    with pytest.raises(ConfigurationError, match=message):
        jobq_settings()


def test_the_bulk_queue_cannot_be_spread(spread, settings):
    settings.JOBQ = {**settings.JOBQ, "BULK_QUEUE": "feeds"}
    with pytest.raises(ConfigurationError, match="BULK_QUEUE"):
        jobq_settings()


def test_a_key_is_placed_by_its_shard_number_and_a_new_database_moves_only_the_keys_it_wins(spread):
    keys = [f"customer-{n}" for n in range(3000)]
    two = {key: shards.choose(["default", "jobs2"], key) for key in keys}
    three = {key: shards.choose(["default", "jobs2", "jobs3"], key) for key in keys}
    assert {key: shards.choose(["jobs2", "default"], key) for key in keys} == two  # order is no matter
    moved = [key for key in keys if two[key] != three[key]]
    assert moved and all(three[key] == "jobs3" for key in moved)  # only to the new database
    shares = Counter(three.values())
    assert all(800 <= shares[alias] <= 1200 for alias in ALIASES), shares  # about a third each


def test_a_keys_place_follows_its_databases_shard_number_not_its_alias(spread, settings):
    keys = [f"customer-{n}" for n in range(500)]
    before = [shards.choose(["default", "jobs2"], key) for key in keys]
    settings.JOBQ = {**settings.JOBQ, "SHARDS": {"jobs3": 1}, "QUEUES": {}}  # jobs2's number, renamed
    after = [shards.choose(["default", "jobs3"], key) for key in keys]
    assert after == [alias.replace("jobs2", "jobs3") for alias in before]
    settings.JOBQ = {**settings.JOBQ, "SHARDS": {"jobs3": 2}}  # another number: other keys
    assert [shards.choose(["default", "jobs3"], key) for key in keys] != after


def test_a_spread_queue_has_no_one_database(spread):
    with pytest.raises(SpansDatabases, match="spread over databases default, jobs2, jobs3"):
        shards.database_of_queue("feeds")
    assert shards.databases_of_queue("pair") == ("jobs2", "jobs3")


# -- placement --------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_job_without_a_key_passes_over_a_database_that_cannot_be_reached_and_a_keyed_one_waits(
    spread, monkeypatch
):
    keyed = next(key for key in (f"k{n}" for n in range(100)) if shards.database_for("pair", key) == "jobs3")
    down = spread["jobs3"]
    down.stop("fast")
    connections["jobs3"].close()  # this thread's session there ended with the server
    try:
        ids = [Job.objects.enqueue("test.noop", queue="pair") for _ in range(10)]
        # every turn of jobs3 went to jobs2, none failed
        assert Job.objects.using("jobs2").filter(id__in=ids).count() == 10
        with pytest.raises(OperationalError):  # a key's database is fixed: its job waits for it
            Job.objects.enqueue("test.noop", queue="pair", shard_key=keyed)
        assert Job.objects.using("jobs2").count() == 10  # and it was written nowhere else
    finally:
        down.start()
        connections["jobs3"].close()
    monkeypatch.setattr(shards, "_UNREACHABLE", {})  # as UNREACHABLE_SECONDS after its refusal
    ids = [Job.objects.enqueue("test.noop", queue="pair") for _ in range(10)]
    assert where(ids) == {"jobs2": 5, "jobs3": 5}  # in turn again
    assert shards.database_of_job(Job.objects.enqueue("test.noop", queue="pair", shard_key=keyed)) == "jobs3"


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_dedupe_key_is_decided_on_the_one_database_it_hashes_to(spread):
    ids = {
        f"order-{n}": Job.objects.enqueue("test.noop", queue="feeds", dedupe_key=f"order-{n}")
        for n in range(60)
    }
    for key, job_id in ids.items():
        assert shards.database_of_job(job_id) == shards.database_for("feeds", key)
        assert Job.objects.enqueue("test.noop", queue="feeds", dedupe_key=key) is None  # taken everywhere
        assert Job.objects.enqueue_or_get("test.noop", queue="feeds", dedupe_key=key) == (job_id, False)
    assert set(where(list(ids.values()))) == set(ALIASES)  # 60 keys reach every database
    assert total() == 60


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_concurrency_key_then_shard_key_place_a_job(spread):
    for n in range(20):
        by_concurrency = Job.objects.enqueue(
            "test.noop", queue="pair", concurrency_key=f"k{n}", shard_key="x"
        )
        assert shards.database_of_job(by_concurrency) == shards.database_for("pair", f"k{n}")
        by_shard_key = Job.objects.enqueue("test.noop", queue="pair", shard_key=f"k{n}")
        assert shards.database_of_job(by_shard_key) == shards.database_of_job(by_concurrency)
        both = Job.objects.enqueue("test.noop", queue="pair", dedupe_key=f"d{n}", concurrency_key=f"k{n}")
        assert shards.database_of_job(both) == shards.database_for("pair", f"d{n}")  # the dedupe key first


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_jobs_without_a_key_take_turns_or_join_the_open_transaction(spread):
    ids = [Job.objects.enqueue("test.noop", queue="feeds") for _ in range(9)]
    assert where(ids) == {"default": 3, "jobs2": 3, "jobs3": 3}
    with transaction.atomic(using="jobs2"):
        inside = [Job.objects.enqueue("test.noop", queue="feeds") for _ in range(5)]
        assert where(inside) == {"jobs2": 5}
    try:
        with transaction.atomic(using="jobs3"):
            Job.objects.enqueue("test.noop", queue="pair")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert total() == 14  # the rolled-back one went with its transaction


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_keyed_job_for_another_database_inside_a_transaction_goes_through_the_outbox(spread):
    key = next(f"k{n}" for n in range(100) if shards.database_for("pair", f"k{n}") == "jobs3")
    with transaction.atomic(using="jobs2"):
        job_id = Job.objects.enqueue("test.noop", queue="pair", concurrency_key=key)
        assert not Job.objects.using("jobs3").filter(id=job_id).exists()  # waits for the commit
    assert Job.objects.using("jobs3").get(id=job_id).concurrency_key == key
    with pytest.raises(ForeignTransaction), transaction.atomic(using="jobs2"):
        Job.objects.enqueue("test.noop", queue="pair", dedupe_key=key)  # decided on jobs3 at once
    assert total() == 1


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_per_key_capped_job_is_placed_by_its_concurrency_key_alone(spread):
    with pytest.raises(InvalidJob, match="placed by its concurrency key alone"):
        Job.objects.enqueue("test.capped_per_key", queue="feeds", dedupe_key="d", concurrency_key="k")
    with pytest.raises(InvalidJob, match=r"job 1: .*concurrency key alone"):
        Job.objects.enqueue_graph(
            [
                GraphNode("test.noop", queue="feeds"),
                GraphNode("test.capped_per_key", queue="feeds", concurrency_key="k"),
            ]
        )
    assert total() == 0
    capped = Job.objects.enqueue("test.capped_per_key", queue="feeds", concurrency_key="k")
    assert shards.database_of_job(capped) == shards.database_for("feeds", "k")


@pytest.mark.parametrize("bad", ["a\x00b", "\ud800", "k" * 1001, 7, ""])
@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_hostile_shard_key_is_refused_before_anything_is_written(spread, bad):
    with pytest.raises(InvalidJob, match="shard_key"):
        Job.objects.enqueue("test.noop", queue="feeds", shard_key=bad)
    with pytest.raises(InvalidJob, match=r"job 1: .*shard_key"):
        Job.objects.enqueue_many(
            [NewJob("test.noop", queue="feeds"), NewJob("test.noop", queue="feeds", shard_key=bad)]
        )
    assert total() == 0


# -- enqueue_many and workflows ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_enqueue_many_writes_each_databases_jobs_and_keyless_ones_together(spread):
    keyless = Job.objects.enqueue_many([NewJob("test.noop", queue="feeds") for _ in range(50)])
    assert len(keyless) == 50 and len(where(keyless)) == 1  # one statement, all or nothing
    keyed = Job.objects.enqueue_many(
        [NewJob("test.noop", queue="feeds", dedupe_key=f"o{n}") for n in range(60)]
        + [NewJob("test.noop", queue="feeds", dedupe_key="o1")]  # a repeat, once
    )
    assert len(keyed) == 60 and set(where(keyed)) == set(ALIASES)
    for job_id in keyed:
        job = Job.objects.using(shards.database_of_job(job_id)).get(id=job_id)
        assert shards.database_for("feeds", job.dedupe_key) == shards.database_of_job(job_id)
    assert (
        Job.objects.enqueue_many([NewJob("test.noop", queue="feeds", dedupe_key=f"o{n}") for n in range(60)])
        == []
    )


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_enqueue_many_over_several_databases_is_refused_whole(spread):
    jobs = [NewJob("test.noop", queue="pair", shard_key=f"s{n}") for n in range(20)]
    with pytest.raises(InvalidJob, match="job 20: "):
        Job.objects.enqueue_many([*jobs, NewJob("test.noop", queue="pair", payload={"x": "\x00"})])
    with pytest.raises(InvalidJob, match="job 20: "), transaction.atomic(using="jobs2"):
        Job.objects.enqueue_many([*jobs, NewJob("test.noop", queue="pair", payload={"x": "\x00"})])
    assert total() == 0 and sum(OutboxEntry.objects.using(a).count() for a in ALIASES) == 0


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_batch_inside_a_transaction_commits_or_rolls_back_with_it_through_its_outbox(spread):
    jobs = [NewJob("test.noop", {"n": n}, queue="pair", shard_key=f"s{n}") for n in range(20)]
    with pytest.raises(RuntimeError), transaction.atomic(using="jobs2"):
        Job.objects.enqueue_many(jobs)  # jobs2's in the transaction, jobs3's in jobs2's outbox
        raise RuntimeError("the order failed")
    assert total() == 0 and OutboxEntry.objects.using("jobs2").count() == 0  # nothing, anywhere
    with transaction.atomic(using="jobs2"):
        ids = Job.objects.enqueue_many(jobs)
        assert Job.objects.using("jobs3").count() == 0  # jobs3's wait for the commit
    assert sorted(
        job.payload["n"] for a in ALIASES for job in Job.objects.using(a).filter(id__in=ids)
    ) == list(range(20))
    shares = where(ids)
    assert set(shares) == {"jobs2", "jobs3"} and OutboxEntry.objects.using("jobs2").count() == 0
    assert [shards.database_of_job(i) for i in ids] == sorted(  # grouped by database, the transaction's first
        (shards.database_of_job(i) for i in ids), key=lambda alias: alias != "jobs2"
    )
    # more than one relay statement's worth, for a queue of another database only
    with transaction.atomic():
        ids = Job.objects.enqueue_many([NewJob("test.noop", {"n": n}, queue="archive") for n in range(1200)])
    assert Job.objects.using("jobs3").filter(id__in=ids).count() == 1200 and OutboxEntry.objects.count() == 0


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_batch_joining_a_transaction_writes_nothing_of_itself_when_a_database_fails(spread):
    jobs = [NewJob("test.noop", {"n": n}, queue="pair", shard_key=f"s{n}") for n in range(20)]
    down = spread["jobs3"]
    down.stop("fast")
    connections["jobs3"].close()
    try:
        with transaction.atomic(using="jobs2"):  # a caller that carries on when the enqueue fails
            Job.objects.using("jobs2").create(task="test.noop", queue="reports")  # its own work
            with pytest.raises(OperationalError):
                Job.objects.enqueue_many(jobs)  # jobs3's ids cannot be reserved
    finally:
        down.start()
        connections["jobs3"].close()
    assert list(Job.objects.using("jobs2").values_list("queue", flat=True)) == [
        "reports"
    ]  # none of the batch
    assert OutboxEntry.objects.using("jobs2").count() == 0


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_keyed_batch_for_the_home_database_and_a_shard_is_refused_in_any_transaction(spread):
    jobs = [NewJob("test.noop", queue="feeds", dedupe_key=f"k{n}") for n in range(30)]  # every database
    for alias in ALIASES:
        with (
            pytest.raises(ForeignTransaction, match="the outbox cannot do"),
            transaction.atomic(using=alias),
        ):
            Job.objects.enqueue_many(jobs)
    assert total() == 0


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_batchs_keyless_jobs_go_to_one_database_their_queues_share(spread):
    for _ in range(4):
        ids = Job.objects.enqueue_many(
            [
                NewJob("test.noop", queue="feeds"),
                NewJob("test.noop", queue="pair"),
                NewJob("test.noop", queue="feeds"),
            ]
        )
        assert len(ids) == 3 and len(where(ids)) == 1 and "default" not in where(ids)


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_tasks_shard_key_places_its_job_and_workflows_take_none(spread):
    from tests.testapp.tasks import noop

    job_id = noop.using(queue="pair", shard_key="acme").enqueue()
    assert shards.database_of_job(job_id) == shards.database_for("pair", "acme")
    with pytest.raises(InvalidJob, match="no shard_key"):
        noop.using(queue="pair", shard_key="acme").s()
    with pytest.raises(InvalidJob, match="no shard_key"):
        Job.objects.enqueue("test.noop", queue="pair", shard_key="acme", depends_on=[job_id])
    with pytest.raises(InvalidJob, match=r"job 0: .*no shard keys"):
        Job.objects.enqueue_many([NewJob("test.noop", queue="pair", shard_key="acme", depends_on=[job_id])])
    assert total() == 1


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_database_refusing_its_share_after_others_committed_is_partly_written(spread, settings):
    settings.JOBQ = {
        **settings.JOBQ,
        "QUEUES": {**settings.JOBQ["QUEUES"], "archive": {"DATABASE": "jobs3", "MAX_DEPTH": 1}},
    }
    Job.objects.enqueue("test.noop", queue="archive")  # archive is full
    jobs = [NewJob("test.noop", queue="reports") for _ in range(3)] + [NewJob("test.noop", queue="archive")]
    with pytest.raises(PartlyWritten, match="database 'jobs3' refused") as raised:
        Job.objects.enqueue_many(jobs)
    assert isinstance(raised.value.__cause__, QueueFull)
    assert sorted(raised.value.ids) == sorted(Job.objects.using("jobs2").values_list("id", flat=True))
    assert len(raised.value.ids) == 3


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_workflows_jobs_share_one_database(spread):
    graphs = [
        Job.objects.enqueue_graph(
            [GraphNode("test.noop", queue="feeds"), GraphNode("test.noop", queue="pair", after=(0,))]
        )
        for _ in range(4)
    ]
    for graph in graphs:
        assert len(where(graph.ids)) == 1 and "default" not in where(graph.ids)  # pair is not on default
    anchor = Job.objects.enqueue("test.noop", queue="archive")
    follower = Job.objects.enqueue("test.noop", queue="feeds", depends_on=[anchor])
    assert shards.database_of_job(follower) == "jobs3"  # beside the job it waits for
    with pytest.raises(SpansDatabases):
        Job.objects.enqueue("test.noop", queue="reports", depends_on=[anchor])


# -- workers and queue-wide calls -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_lane_of_a_spread_queue_serves_each_of_its_databases(spread):
    assert lanes_by_database({"feeds": 2, "pair": 1}) == {
        "default": {"feeds": 2}, "jobs2": {"feeds": 2, "pair": 1}, "jobs3": {"feeds": 2, "pair": 1},
    }  # fmt: skip
    with pytest.raises(ConfigurationError, match="queue 'pair' is on database"):
        Worker({"pair": 1})  # not on the home database
    ids = [Job.objects.enqueue("test.record", queue="feeds", shard_key=f"s{n}") for n in range(30)]
    assert set(where(ids)) == set(ALIASES)
    group = WorkerGroup(
        lanes_by_database({"feeds": 2}),
        lambda its, worker_id: Worker(its, worker_id=worker_id, burst=True, poll_interval=0.2),
    )
    thread = threading.Thread(target=group.run, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the burst worker group did not end"
    assert sorted(Execution.objects.values_list("job_id", flat=True)) == sorted(ids)  # each once
    assert Job.objects.counts("feeds")["DONE"] == 30


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_pause_counts_cancel_and_status_reach_every_database_of_the_queue(spread):
    ids = [Job.objects.enqueue("test.noop", queue="feeds", delay=3600) for _ in range(6)]
    assert Job.objects.counts("feeds")["PENDING"] == 6
    assert Job.objects.pause_queue("feeds", by="ops")
    assert all(QueueState.objects.using(alias).get(name="feeds").paused for alias in ALIASES)
    assert not Job.objects.pause_queue("feeds")  # paused everywhere already
    out = io.StringIO()
    call_command("jobq_queue", "status", "feeds", stdout=out)
    assert out.getvalue().count("paused on") == 3, out.getvalue()
    out = io.StringIO()
    call_command("jobq_queue", "status", stdout=out)
    assert "feeds" in out.getvalue()
    assert Job.objects.resume_queue("feeds")
    assert not Job.objects.resume_queue("feeds")
    assert Job.objects.cancel_many(queue="feeds").cancelled == 6
    assert {Job.objects.using(shards.database_of_job(i)).get(id=i).status for i in ids} == {
        JobStatus.CANCELLED
    }
