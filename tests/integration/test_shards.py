"""Queues placed on other PostgreSQL servers (django_jobq.shards), against two real servers of their
own (tests/servers/shards.py, "jobs2" as shard 1 and "jobs3" as shard 2) beside the test database:
ids in each shard's range, every operation on a job run on the database its id names, enqueues
refused before anything is written when they could not commit with the caller's transaction or
would span databases, one worker process draining every database, and the others draining while one
is down."""

from __future__ import annotations

import datetime as dt
import io
import json
import threading

import pytest
import time_machine
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import connections, transaction

from django_jobq import shards
from django_jobq.conf import on_database
from django_jobq.exceptions import (
    ConfigurationError,
    ForeignTransaction,
    InvalidJob,
    InvalidPayload,
    JobqError,
    SpansDatabases,
    UnknownShard,
)
from django_jobq.managers.outbox import OutboxManager
from django_jobq.managers.outbox import _relay_params as relay_params
from django_jobq.managers.producing import NewJob
from django_jobq.models import Job, JobStatus, OutboxEntry
from django_jobq.worker import Worker
from tests.conftest import start_worker, wait_until
from tests.servers.shards import QUEUES, SHARDS, run_group
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration]
ALIASES = ["default", *SHARDS]  # each test's databases: flushed after it
FLOOR = {"default": 1, "jobs2": 1 << 48, "jobs3": 2 << 48}


def on_every_database(task: str, each: int) -> list[int]:
    """The ids of ``each`` jobs of ``task`` enqueued to a queue of each database."""
    return [
        Job.objects.enqueue(task, queue=q) for q in ("default", "reports", "archive") for _ in range(each)
    ]


def on(alias: str) -> list[Job]:
    return list(Job.objects.using(alias).order_by("id"))


# -- identity ---------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_each_database_hands_out_ids_of_its_own_range_and_the_id_names_it(placed):
    ids = {
        "default": Job.objects.enqueue("test.noop"),
        "jobs2": Job.objects.enqueue("test.noop", queue="reports"),
        "jobs3": Job.objects.enqueue("test.noop", queue="archive"),
    }
    for alias, job_id in ids.items():
        assert FLOOR[alias] <= job_id < FLOOR[alias] + (1 << 48), (alias, job_id)
        assert shards.database_of_job(job_id) == alias
        assert [job.id for job in on(alias)] == [job_id]  # written there, and only there


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_operations_on_one_job_run_on_the_database_its_id_names(placed):
    job_id = Job.objects.enqueue("test.noop", queue="reports", delay=3600)
    assert Job.objects.reschedule(job_id, priority=7)
    assert Job.objects.using("jobs2").get(id=job_id).priority == 7
    assert Job.objects.cancel(job_id).name == "CANCELLED"
    assert Job.objects.using("jobs2").get(id=job_id).status == JobStatus.CANCELLED
    assert Job.objects.requeue(job_id)
    assert Job.objects.using("jobs2").get(id=job_id).status == JobStatus.PENDING
    other = Job.objects.enqueue("test.noop", queue="archive", delay=3600)
    counts = Job.objects.cancel_many(ids=[job_id, other])
    assert (counts.cancelled, counts.requested) == (2, 0)
    assert Job.objects.using("jobs3").get(id=other).status == JobStatus.CANCELLED
    assert Job.objects.pause_queue("reports")
    with on_database("jobs2"):
        assert Job.objects.paused_queues() == ["reports"]
    assert Job.objects.paused_queues() == []  # the home database's: not paused there
    assert Job.objects.resume_queue("reports")


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_an_id_of_a_shard_that_is_not_configured_is_refused(placed):
    stray = (7 << 48) + 1
    for call in (
        lambda: Job.objects.cancel(stray),
        lambda: Job.objects.reschedule(stray, priority=1),
        lambda: Job.objects.requeue(stray),
        lambda: Job.objects.wait_for(stray, timeout=0.1),
        lambda: Job.objects.enqueue("test.noop", depends_on=[stray]),
    ):
        with pytest.raises(UnknownShard):
            call()
    assert not any(on(alias) for alias in ("default", *SHARDS))


# -- what one enqueue may write ---------------------------------------------------------------------


def outbox(alias: str = "default") -> list[tuple[int, str]]:
    return list(OutboxEntry.objects.using(alias).order_by("id").values_list("job_id", "database"))


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_an_enqueue_inside_another_databases_transaction_commits_or_rolls_back_with_it(placed):
    with transaction.atomic():  # the application's transaction, on default
        job_id = Job.objects.enqueue("test.noop", {"n": 1}, queue="reports", priority=3)
        assert shards.database_of_job(job_id) == "jobs2"
        assert on("jobs2") == [] and outbox() == [(job_id, "jobs2")]  # waits in the outbox
    job = Job.objects.using("jobs2").get(id=job_id)  # relayed once the transaction committed
    assert (job.task, job.payload, job.priority, job.status) == ("test.noop", {"n": 1}, 3, JobStatus.PENDING)
    assert outbox() == []
    with pytest.raises(RuntimeError), transaction.atomic():
        gone = Job.objects.enqueue("test.noop", queue="reports")
        raise RuntimeError("rolled back")
    assert not Job.objects.using("jobs2").filter(id=gone).exists() and outbox() == []
    # inside a transaction on the queue's own database it commits, or rolls back, with that one
    with pytest.raises(RuntimeError), transaction.atomic(using="jobs2"):
        Job.objects.enqueue("test.noop", queue="reports")
        raise RuntimeError("rolled back")
    assert [job.id for job in on("jobs2")] == [job_id]
    # a queue of the home database is as before: inside the caller's transaction
    with transaction.atomic():
        Job.objects.enqueue("test.noop")
    assert len(on("default")) == 1


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_what_the_outbox_cannot_carry_is_refused_before_anything_is_written(placed, settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {**QUEUES, "capped": {"DATABASE": "jobs2", "MAX_DEPTH": 5}}}
    refused = [
        lambda: Job.objects.enqueue("test.noop", queue="reports", dedupe_key="k"),  # decided at once
        lambda: Job.objects.enqueue_or_get("test.noop", queue="reports", dedupe_key="k"),
        lambda: Job.objects.enqueue("test.noop", queue="capped"),  # MAX_DEPTH: decided at once
        lambda: Job.objects.enqueue_many([NewJob("test.noop", queue="reports", dedupe_key="k")]),
        lambda: Job.objects.enqueue_many([NewJob("test.noop"), NewJob("test.noop", queue="capped")]),
    ]
    for call in refused:
        with pytest.raises(ForeignTransaction), transaction.atomic():
            call()
    with pytest.raises(ForeignTransaction), transaction.atomic(), transaction.atomic(using="jobs3"):
        Job.objects.enqueue("test.noop", queue="reports")  # open on two other databases
    assert on("jobs2") == [] and on("default") == [] and outbox() == [] and outbox("jobs3") == []


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_outbox_relays_each_job_once_however_often_it_is_relayed(placed, monkeypatch):
    # the enqueuing process dies right after its commit: nothing relays its entries but the backstop
    monkeypatch.setattr(OutboxManager, "_relay_committed", lambda *args: None)
    with transaction.atomic():
        ids = [Job.objects.enqueue("test.noop", {"i": i}, queue="reports") for i in range(200)]
    entries = list(OutboxEntry.objects.order_by("id"))
    assert len(entries) == 200 and on("jobs2") == []
    # a relay that wrote the first 50 jobs, then died before deleting their entries
    with on_database("jobs2"):
        rows = [(e.id, e.job_id, e.database, e.job, e.created_at) for e in entries[:50]]
        Job.objects._execute(Job.objects._sql().RELAY_JOBS, Job.objects._notify_params(relay_params(rows)))
    assert len(on("jobs2")) == 50

    def relay() -> None:
        try:
            for _ in range(5):
                Job.objects.relay_outbox(grace=0)
        finally:
            connections.close_all()

    relays = [threading.Thread(target=relay) for _ in range(2)]  # two backstops at once
    for thread in relays:
        thread.start()
    for thread in relays:
        thread.join(60)
    assert outbox() == []
    assert sorted(Job.objects.using("jobs2").values_list("id", flat=True)) == sorted(ids)
    assert sorted(job.payload["i"] for job in on("jobs2")) == list(range(200))


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_reaper_relays_what_a_process_left_and_a_worker_runs_it(placed, monkeypatch):
    from django_jobq import reaper

    monkeypatch.setattr(OutboxManager, "_relay_committed", lambda *args: None)
    monkeypatch.setattr(reaper, "OUTBOX_GRACE_SECONDS", 0)
    with transaction.atomic():
        job_id = Job.objects.enqueue("test.record", queue="reports")
    assert outbox() == [(job_id, "jobs2")]
    shown = io.StringIO()
    call_command("jobq_stats", stdout=shown)  # a job waiting in the outbox is visible
    assert "outbox: 1 job(s) not relayed yet" in shown.getvalue()
    call_command("jobq_reap", once=True, stdout=io.StringIO())
    assert outbox() == [] and [job.id for job in on("jobs2")] == [job_id]
    _, thread = run_group({"reports": 1}, burst=True, poll_interval=0.2)
    thread.join(60)
    assert list(Execution.objects.values_list("job_id", flat=True)) == [job_id]


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_workflow_spanning_databases_is_refused_before_anything_is_written(placed):
    first = Job.objects.enqueue("test.noop", queue="reports", delay=3600)
    with pytest.raises(SpansDatabases):  # a job depends only on jobs of its own database
        Job.objects.enqueue("test.noop", queue="archive", depends_on=[first])
    with pytest.raises(SpansDatabases):
        Job.objects.enqueue_many([
            NewJob("test.noop", queue="reports"), NewJob("test.noop", queue="default", depends_on=[first]),
        ])  # fmt: skip
    assert [job.id for job in on("jobs2")] == [first] and on("jobs3") == [] and on("default") == []


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_batch_and_a_workflow_are_written_on_their_queues_database(placed):
    keyed = Job.objects.enqueue_many(
        [NewJob("test.noop", queue="reports", dedupe_key=f"k{i}") for i in range(5)]
    )
    copied = Job.objects.enqueue_many([NewJob("test.noop", queue="archive") for _ in range(600)])  # COPY
    assert all(shards.database_of_job(i) == "jobs2" for i in keyed) and len(on("jobs2")) == 5
    assert all(shards.database_of_job(i) == "jobs3" for i in copied) and len(on("jobs3")) == 600
    from django_jobq.workflows import Signature, Workflow, chain

    handle = chain(Signature("test.noop", queue="reports"), Signature("test.noop", queue="reports")).enqueue(
        name="w"
    )
    assert shards.database_of_job(handle.id) == "jobs2"
    assert Workflow.get(handle.id).job_ids == sorted(handle.job_ids)
    assert on("default") == []


# -- workers ----------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_one_worker_drains_the_queues_of_every_database(placed):
    ids = on_every_database("test.record", 20)
    group, thread = run_group({"*": 2}, burst=True, poll_interval=0.2)
    thread.join(120)
    assert not thread.is_alive(), "the burst worker group did not end"
    assert set(group.workers) == {"default", "jobs2", "jobs3"}
    assert len({w.worker_id for w in group.workers.values()}) == 1
    for alias in ("default", *SHARDS):
        assert {job.status for job in on(alias)} == {JobStatus.DONE}, alias
    ran = list(Execution.objects.values_list("job_id", flat=True))
    assert sorted(ran) == sorted(ids)  # each job once


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_worker_refuses_a_lane_of_another_databases_queue(placed):
    with pytest.raises(ConfigurationError, match=r"queue 'reports' is on database\(s\) jobs2, not 'default'"):
        Worker({"reports": 1})
    with on_database("jobs2"):
        Worker({"reports": 1, "*": 1})  # there, it is its own


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_other_databases_drain_while_one_is_down(placed):
    down = placed["jobs3"]
    group, thread = run_group({"*": 2}, poll_interval=0.2)
    try:
        wait_until(group.started.is_set, message="the workers started")
        stuck = Job.objects.enqueue("test.record", queue="archive", delay=1)
        down.stop("fast")
        try:
            fine = [
                Job.objects.enqueue("test.record", queue=q) for q in ("default", "reports") for _ in range(10)
            ]
            wait_until(
                lambda: Execution.objects.filter(job_id__in=fine).count() == 20, timeout=60,
                message="the jobs of the databases that are up ran",
            )  # fmt: skip
        finally:
            down.start()
            connections["jobs3"].close()  # this thread's session there ended with the server
        wait_until(lambda: Execution.objects.filter(job_id=stuck).exists(), timeout=60,
                   message="the job of the database that came back ran")  # fmt: skip
    finally:
        group.stop()
        thread.join(60)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_jobq_worker_serves_every_database_from_one_process(placed):
    ids = on_every_database("test.record", 5)
    env = {
        "JOBQ_TEST_SHARDS": json.dumps({a: [n, placed[a].port] for a, n in SHARDS.items()}),
        "JOBQ_QUEUES": json.dumps(QUEUES),
    }
    worker = start_worker("--queues", "*:2", "--burst", env=env)
    assert worker.wait(120) == 0
    assert sorted(Execution.objects.values_list("job_id", flat=True)) == sorted(ids)
    assert all(job.status == JobStatus.DONE for alias in ("default", *SHARDS) for job in on(alias))


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_jobq_reap_returns_expired_leases_on_every_database(placed):
    expired = {}
    for alias, queue in (("jobs2", "reports"), ("jobs3", "archive")):
        job_id = Job.objects.enqueue("test.noop", queue=queue)
        with on_database(alias):
            assert Job.objects.claim("gone", queues=[queue], lease_seconds=30)
        Job.objects.using(alias).filter(id=job_id).update(lease_until="2000-01-01T00:00:00Z")
        expired[alias] = job_id
    call_command("jobq_reap", once=True, stdout=io.StringIO())
    for alias, job_id in expired.items():
        assert Job.objects.using(alias).get(id=job_id).status == JobStatus.PENDING, alias


# -- configuration ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobq", "message"),
    [
        ({"SHARDS": {"nowhere": 1}}, "not an alias of settings.DATABASES"),
        ({"SHARDS": {"default": 1}}, r'JOBQ\["DATABASE"\] is shard 0'),
        ({"SHARDS": {"jobs2": 0}}, r"must be an integer in \[1, 1023\]"),
        ({"SHARDS": {"jobs2": 1024}}, r"must be an integer in \[1, 1023\]"),
        ({"SHARDS": {"jobs2": True}}, r"must be an integer in \[1, 1023\]"),
        ({"SHARDS": {"jobs2": 1, "jobs3": 1}}, "shard number 1 is also 'jobs2'"),
        ({"SHARDS": ["jobs2"]}, "must be a dict"),
        (
            {"SHARDS": {"jobs2": 1}, "QUEUES": {"r": {"DATABASE": "jobs3"}}},
            'must be JOBQ\\["DATABASE"\\] or an alias',
        ),
        (
            {"QUEUES": {"r": {"DATABASE": "x'; DROP TABLE jobq_job; --"}}},
            'must be JOBQ\\["DATABASE"\\] or an alias',
        ),
        ({"QUEUES": {"r": {"DATABASE": ""}}}, "must be a database alias"),
        ({"SHARDS": {"jobs2": 1}, "POOL_MODE": "transaction", "LISTEN_DATABASE": "default"}, "POOL_MODE"),
    ],
)
def test_bad_shard_settings_are_refused(shard_servers, jobq, message):
    from django_jobq.conf import JobqSettings

    with pytest.raises(ConfigurationError, match=message):
        JobqSettings.from_dict(jobq)


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_shard_whose_ids_are_not_bounded_is_named_by_the_checks_and_refused_by_a_worker(placed):
    def warned() -> list[str]:
        return [
            m.msg for m in checks.run_checks(databases=list(SHARDS)) if m.id in ("jobq.E014", "jobq.W015")
        ]

    assert warned() == []
    with connections["jobs3"].cursor() as cursor:
        cursor.execute("ALTER SEQUENCE jobq_job_id_seq MINVALUE 1 RESTART WITH 5")
    try:
        assert len(warned()) == 1 and "shard 'jobs3'" in warned()[0]
        with on_database("jobs3"), pytest.raises(ConfigurationError, match="not its range"):
            Worker({"archive": 1})
        # migrate, with the system checks it runs first (as manage.py does), bounds it again
        call_command("migrate", database="jobs3", verbosity=0, skip_checks=False)
        assert warned() == []
    finally:
        call_command("migrate", database="jobs3", verbosity=0)


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_migrate_runs_with_its_checks_on_every_database_of_a_sharded_setup(placed):
    for alias in ALIASES:
        call_command("migrate", database=alias, verbosity=0, skip_checks=False)
    assert shards.database_of_job(Job.objects.enqueue("test.noop", queue="reports")) == "jobs2"


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_migrating_a_shard_that_holds_ids_of_another_range_is_refused(placed):
    with connections["jobs3"].cursor() as cursor:
        cursor.execute("ALTER SEQUENCE jobq_job_id_seq MINVALUE 1 RESTART WITH 5")
    Job.objects.using("jobs3").create(task="test.noop", queue="archive", payload={})
    with pytest.raises(JobqError, match="outside its shard's range"):
        call_command("migrate", database="jobs3", verbosity=0)
    with connections["jobs3"].cursor() as cursor:
        cursor.execute("TRUNCATE jobq_job CASCADE")
    call_command("migrate", database="jobs3", verbosity=0)
    assert shards.database_of_job(Job.objects.enqueue("test.noop", queue="archive")) == "jobs3"


# -- operators --------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_jobq_stats_shows_each_database_and_their_totals_and_a_down_one_as_such(placed):
    for queue, n in (("default", 1), ("reports", 2), ("archive", 3)):
        for _ in range(n):
            Job.objects.enqueue("test.noop", queue=queue)
    out = io.StringIO()
    call_command("jobq_stats", stdout=out)
    text = out.getvalue()
    for alias, number in (("default", 0), *SHARDS.items()):
        assert f"== database {alias!r} (shard {number})" in text
    assert "== all 3 of 3 databases: 6 pending (6 due), 0 running" in text
    report = io.StringIO()
    call_command("jobq_stats", "--json", stdout=report)
    figures = json.loads(report.getvalue())
    assert {a: figures["databases"][a]["total"]["pending"] for a in ALIASES} == {
        "default": 1,
        "jobs2": 2,
        "jobs3": 3,
    }
    assert figures["total"]["pending"] == 6 and figures["unreadable"] == {}
    assert figures["outbox"]["default"] == {"jobs": 0, "oldest_seconds": None}
    placed["jobs3"].stop("fast")
    try:
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(CommandError) as raised:
            call_command("jobq_stats", stdout=out, stderr=err)
        assert raised.value.returncode == 3
        assert "== all 2 of 3 databases: 3 pending" in out.getvalue()
        assert "cannot read its figures" in out.getvalue() and "database 'jobs3'" in err.getvalue()
    finally:
        placed["jobs3"].start()
        connections["jobs3"].close()


# -- review of the edges ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_placed_queues_schedule_publishes_each_tick_once_and_a_down_shard_holds_back_only_its_own(
    placed, python_clock
):
    from django_jobq.models import Schedule
    from django_jobq.scheduler import Scheduler

    t0 = dt.datetime(2026, 4, 1, 9, 0, 30, tzinfo=dt.UTC)
    with time_machine.travel(t0, tick=False) as clock:
        for name, queue in (("home", None), ("placed", "reports")):
            Schedule.objects.create(name=name, task="test.noop", cron="0 * * * *", queue=queue)
        Scheduler().run_once()  # both start from their next tick
        clock.move_to(dt.datetime(2026, 4, 1, 10, 0, 2, tzinfo=dt.UTC))
        placed["jobs2"].stop("fast")
        try:
            result = Scheduler().run_once()
        finally:
            placed["jobs2"].start()
        assert set(result.published) == {"home"} and set(result.failed) == {"placed"}
        assert set(Scheduler().run_once().published) == {"placed"}  # the shard is back: published
        # a pass that published the tick and then rolled back on the home database, replayed
        Schedule.objects.filter(name="placed").update(
            next_run_at=dt.datetime(2026, 4, 1, 10, 0, tzinfo=dt.UTC)
        )
        from django_jobq.models import ScheduleTick

        ScheduleTick.objects.filter(schedule="placed").delete()
        Scheduler().run_once()
    assert [job.dedupe_key for job in on("jobs2")] == ["schedule:placed:2026-04-01T10:00:00Z"]
    assert len(on("default")) == 1


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_home_queues_job_inside_a_shards_transaction_commits_with_it_through_that_outbox(placed):
    with transaction.atomic(using="jobs3"):
        job_id = Job.objects.enqueue("test.noop")  # the home database's queue
        assert on("default") == [] and outbox("jobs3") == [(job_id, "default")]
        with pytest.raises(ForeignTransaction):  # a keyed job is decided on its database at once
            Job.objects.enqueue("test.noop", queue="reports", dedupe_key="k")
    assert [job.id for job in on("default")] == [job_id] and outbox("jobs3") == []
    assert job_id < 1 << 48


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_task_body_on_a_shard_runs_on_the_home_context(placed):
    job_id = Job.objects.enqueue("test.where_am_i", queue="reports")
    _, thread = run_group({"reports": 1}, burst=True, poll_interval=0.2)
    thread.join(60)
    # its rate limits, inbound marks and ORM calls are the application's, not the shard's
    assert Job.objects.using("jobs2").get(id=job_id).result == {"database": None}


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_first_worker_to_reach_max_jobs_stops_the_group(placed):
    for _ in range(3):  # work on the home database only: the shards' workers never reach the budget
        Job.objects.enqueue("test.noop")
    group, thread = run_group({"*": 1}, max_jobs=2, poll_interval=0.2)
    thread.join(60)
    assert not thread.is_alive()  # not left serving the shards once the home database's budget is spent
    assert group.workers["default"].processed == 2 and group.processed == 2


def test_ids_past_the_home_range_are_the_home_databases_when_nothing_is_sharded(settings):
    settings.JOBQ = {k: v for k, v in settings.JOBQ.items() if k != "SHARDS"}
    assert shards.database_of_job(5 << 48) == "default"


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_an_atomic_task_is_refused_on_a_queue_of_another_database(placed):
    with pytest.raises(InvalidJob, match="is atomic"):
        Job.objects.enqueue("test.atomic_record", queue="reports")
    assert on("jobs2") == []


@pytest.mark.django_db(transaction=True, databases=ALIASES)
@pytest.mark.parametrize(
    "payload",
    [{"a": "\x00"}, {"a": "\ud800"}, {"a": "x" * (300 * 1024)}, "nested"],
    ids=["nul", "lone surrogate", "huge", "deep"],
)
def test_hostile_payloads_through_the_outbox_are_refused_before_anything_is_written(placed, payload):
    if payload == "nested":
        payload = {}
        for _ in range(200):
            payload = {"a": payload}
    with pytest.raises(InvalidPayload), transaction.atomic():  # PayloadTooLarge is one
        Job.objects.enqueue("test.noop", payload, queue="reports")
    assert outbox() == [] and on("jobs2") == []
