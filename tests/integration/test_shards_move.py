"""Moving a queue's jobs off a database it is no longer on (django_jobq.managers.moving, manage.py
jobq_queue move), against two real servers of their own beside the test database
(tests/servers/shards.py): what each job carries kept column by column, dedupe keys decided where
they go, jobs of a workflow or awaited staying, a move cut between its commits finished by a relay
once, and a move while workers drain both databases running each job once."""

from __future__ import annotations

import datetime as dt
import io
import threading

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_jobq import shards
from django_jobq.conf import on_database
from django_jobq.exceptions import InvalidJob
from django_jobq.managers.graphs import GraphNode
from django_jobq.managers.outbox import OutboxManager
from django_jobq.models import Job, JobStatus, OutboxEntry
from django_jobq.worker import Worker
from django_jobq.worker.group import WorkerGroup
from django_jobq.worker.lanes import lanes_by_database
from tests.conftest import wait_until
from tests.servers.shards import SHARDS
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration]
ALIASES = ["default", *SHARDS]


def where(job_ids: list[int]) -> set[str]:
    """The databases that hold any of ``job_ids`` (read from the databases, not from the ids)."""
    return {alias for alias in ALIASES if Job.objects.using(alias).filter(id__in=job_ids).exists()}


def moved_to(settings, queue: dict) -> None:
    """JOBQ["QUEUES"]["reports"] placed anew (as a deploy would)."""
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {**settings.JOBQ["QUEUES"], "reports": queue}}


def move(*args: str) -> str:
    out = io.StringIO()
    call_command("jobq_queue", "move", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_move_takes_a_queues_pending_jobs_to_where_it_is_now_keeping_what_they_carry(spread, settings):
    later = timezone.now().replace(microsecond=0) + dt.timedelta(hours=3)
    plain = [Job.objects.enqueue("test.noop", {"n": n}, queue="reports") for n in range(1100)]
    Job.objects.enqueue("test.noop", {"n": "k"}, queue="reports", dedupe_key="order-1", dedupe_done=60)
    Job.objects.enqueue("test.noop", {"n": "freed"}, queue="reports", dedupe_key="order-3")
    rich = Job.objects.enqueue(
        "test.noop", {"n": "rich"}, queue="reports", priority=7, run_at=later, tags=["vip"], fairness_key="t1"
    )
    errors = [{"attempt": 1, "error": "boom"}, {"attempt": 2, "error": "boom"}]
    Job.objects.using("jobs2").filter(id=rich).update(
        attempts=2,
        error_count=2,
        last_error="boom",
        errors=errors,
        snoozes=3,
        created_at=later - dt.timedelta(days=1),
    )
    held = Job.objects.enqueue("test.noop", {"n": "dropped"}, queue="reports", dedupe_key="order-2")
    graph = Job.objects.enqueue_graph(
        [GraphNode("test.noop", queue="reports"), GraphNode("test.noop", queue="reports", after=(0,))]
    )
    awaited = Job.objects.enqueue("test.noop", {"n": "awaited"}, queue="reports")
    Job.objects.using("jobs2").filter(id=awaited).update(awaited=True)  # a wait_for holds its id
    moved_to(settings, {"DATABASE": "jobs3"})
    taken = Job.objects.enqueue("test.noop", {"n": "held"}, queue="reports", dedupe_key="order-2")  # on jobs3
    with on_database("jobs3"):  # a finished holder whose window is over: its key is freed by the move
        Job.objects.create(task="test.noop", queue="reports", status=JobStatus.DONE, dedupe_key="order-3",
                           finished_at=timezone.now() - dt.timedelta(days=2), payload={"n": "old"})  # fmt: skip
    out = move("reports", "--from", "jobs2", "--batch", "400")
    assert "moved 1103 PENDING job(s) from jobs2 to jobs3" in out, out
    assert "1 dropped: their dedupe key is held there" in out and "3 job(s) yet to run stay on jobs2" in out
    assert sorted(Job.objects.using("jobs2").values_list("id", flat=True)) == sorted([*graph.ids, awaited])
    assert not OutboxEntry.objects.using("jobs2").exists()
    there = {str(job.payload.get("n")): job for job in Job.objects.using("jobs3").all()}
    assert set(there) == {
        *map(str, range(1100)),
        "k",
        "freed",
        "rich",
        "held",
        "old",
    }  # "dropped": once, held
    assert there["held"].id == taken and held not in plain
    assert all(shards.database_of_job(job.id) == "jobs3" for job in there.values())
    moved = there["rich"]
    assert (moved.priority, moved.run_at, moved.tags, moved.fairness_key) == (7, later, ["vip"], "t1")
    assert (moved.attempts, moved.error_count, moved.last_error, moved.errors) == (2, 2, "boom", errors)
    assert moved.snoozes == 3 and moved.created_at == later - dt.timedelta(days=1)
    assert there["k"].dedupe_key == "order-1" and there["k"].dedupe_done.total_seconds() == 60
    assert Job.objects.enqueue("test.noop", queue="reports", dedupe_key="order-1") is None  # still held
    assert there["freed"].dedupe_key == "order-3" and not there["freed"].key_released
    assert move("reports", "--from", "jobs2").startswith("queue reports: moved 0")  # again: nothing to do


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_move_cut_between_its_commits_is_finished_by_a_relay_once(spread, settings, monkeypatch):
    for n in range(300):
        Job.objects.enqueue("test.noop", {"n": n}, queue="reports")
    moved_to(settings, {"DATABASES": ["default", "jobs3"]})  # spread: each job by its key, else in turn

    def cut(self, ids, grace):
        raise RuntimeError("the process died after its batch committed")

    monkeypatch.setattr(OutboxManager, "_relay", cut)
    with pytest.raises(RuntimeError):
        Job.objects.move_pending("reports", "jobs2", batch=100)
    monkeypatch.undo()
    assert Job.objects.using("jobs2").count() == 200 and OutboxEntry.objects.using("jobs2").count() == 100
    with on_database("jobs2"):
        assert Job.objects.relay_outbox(grace=0) == 100  # the reaper's pass
        assert Job.objects.relay_outbox(grace=0) == 0
    assert Job.objects.move_pending("reports", "jobs2").written == 200
    payloads = [j.payload["n"] for alias in ("default", "jobs3") for j in Job.objects.using(alias).all()]
    assert sorted(payloads) == list(range(300))  # each once
    assert set(where(list(Job.objects.using("default").values_list("id", flat=True)))) == {"default"}


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_move_while_workers_run_runs_each_job_once(spread, settings):
    ids = [Job.objects.enqueue("test.record", {"n": n}, queue="reports") for n in range(400)]
    moved_to(settings, {"DATABASE": "jobs3"})
    group = WorkerGroup(
        lanes_by_database({"*": 2}),
        lambda its, worker_id: Worker(its, worker_id=worker_id, poll_interval=0.1),
    )
    thread = threading.Thread(target=group.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: Execution.objects.count() >= 20, message="the workers started on jobs2's jobs")
        assert Job.objects.move_pending("reports", "jobs2", batch=50).written > 0
        wait_until(lambda: Execution.objects.count() >= len(ids), timeout=120, message="every job ran")
    finally:
        group.stop()
        thread.join(60)
    done = [
        j.payload["n"]
        for alias in ("jobs2", "jobs3")
        for j in Job.objects.using(alias).filter(status=JobStatus.DONE)
    ]
    assert sorted(done) == list(range(400))  # none lost, none doubled
    assert Execution.objects.count() == 400  # each ran once


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_move_refuses_a_database_the_queue_is_on_and_an_unknown_one(spread):
    with pytest.raises(CommandError, match="queue 'reports' is on 'jobs2'"):
        move("reports", "--from", "jobs2")
    for bad in ("nowhere", "x'; drop table jobq_job; --"):
        with pytest.raises(CommandError, match="move needs --from"):
            move("reports", "--from", bad)
    with pytest.raises(CommandError, match="move needs --from"):
        move("reports")
    with pytest.raises(CommandError, match="batch must be between 1 and 500"):
        move("reports", "--from", "jobs3", "--batch", "0")


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_moved_job_is_found_by_its_old_id_by_every_call_that_takes_one(spread, settings, admin_client):
    from tests.testapp import dtasks

    settings.TASKS = {"default": {**settings.TASKS["default"], "QUEUES": ["default", "reports"]}}
    old = [Job.objects.enqueue("test.noop", {"n": n}, queue="reports") for n in range(5)]
    old.append(int(dtasks.add.using(queue_name="reports").enqueue(1, 2).id))  # a Django task's result id
    assert {shards.database_of_job(i) for i in old} == {"jobs2"}
    moved_to(settings, {"DATABASE": "jobs3"})
    assert "moved 6 PENDING job(s)" in move("reports", "--from", "jobs2")
    assert where(old) == set()  # gone from jobs2 ...
    new = Job.objects.current_ids(old)
    assert {shards.database_of_job(i) for i in new} == {"jobs3"} and where(new) == {
        "jobs3"
    }  # ... found on jobs3
    assert Job.objects.current_id(new[0]) == new[0]  # a current id is its own
    later = timezone.now() + dt.timedelta(hours=1)
    assert Job.objects.reschedule(old[0], run_at=later, priority=3)
    assert Job.objects.using("jobs3").get(id=new[0]).priority == 3
    assert Job.objects.cancel(old[1]).name == "CANCELLED"
    assert Job.objects.cancel_many(ids=[old[2], old[3]]).cancelled == 2
    assert Job.objects.requeue_many([old[1]]) == [old[1]]  # CANCELLED -> PENDING on jobs3; as asked
    assert Job.objects.using("jobs3").get(id=new[1]).status == JobStatus.PENDING
    Job.objects.using("jobs3").filter(id=new[4]).update(status=JobStatus.DONE, finished_at=timezone.now(),
                                                         result={"ok": True})  # fmt: skip
    assert Job.objects.wait_for(old[4], timeout=5).id == new[4]
    page = admin_client.get(f"/admin/django_jobq/job/{old[0]}/change/", {"_changelist_filters": "q=1"})
    assert page.status_code == 302  # the console's page of it now, the query kept
    assert page["Location"].endswith(f"/job/{new[0]}/change/?_changelist_filters=q%3D1")
    dead = admin_client.get(f"/admin/django_jobq/deadjob/{old[0]}/change/")  # a job page, not a dead letter's
    assert dead.status_code == 302 and dead["Location"].endswith(f"/django_jobq/job/{new[0]}/change/")
    assert admin_client.get(page["Location"]).status_code == 200
    found = dtasks.add.get_result(str(old[5]))
    assert found.id == str(old[5]) and found.status.name == "READY"  # the id its caller holds
    # moved again: followed over both moves
    moved_to(settings, {"DATABASE": "jobs2"})
    assert "moved" in move("reports", "--from", "jobs3")
    again = Job.objects.current_id(old[5])
    assert shards.database_of_job(again) == "jobs2" and where([again]) == {"jobs2"}


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_calls_by_id_while_a_move_commits_find_the_job_where_it_went(spread, settings, monkeypatch):
    old = Job.objects.enqueue("test.noop", queue="reports")
    moved_to(settings, {"DATABASE": "jobs3"})
    real = type(Job.objects).current_ids
    calls = []

    def resolved_before_the_move(self, job_ids):  # the first resolution runs before the move commits
        calls.append(list(job_ids))
        if len(calls) == 1:
            found = real(self, job_ids)
            move("reports", "--from", "jobs2")
            return found
        return real(self, job_ids)

    monkeypatch.setattr(type(Job.objects), "current_ids", resolved_before_the_move)
    assert Job.objects.cancel(old).name == "CANCELLED"
    assert Job.objects.using("jobs3").get(id=real(Job.objects, [old])[0]).status == JobStatus.CANCELLED


@pytest.mark.parametrize("bad", ["12", 0, -1, 1 << 63, 1.5, None, "\x00", "\ud800"])
def test_current_ids_refuses_what_is_not_a_job_id_before_reading_anything(spread, bad):
    with pytest.raises(InvalidJob):
        Job.objects.current_ids([bad])
