"""Workflows run by real workers on a real PostgreSQL: a dependent added to a job at the moment it
finishes is never left waiting; a chain and a group with a callback drain through real worker
processes, each released job woken by the trigger's NOTIFY (the poll is set to a minute), the callback
once, with what it waited for."""

import threading

import pytest
from django.db import connections

from django_jobq.models import Job, JobStatus
from django_jobq.workflows import Signature, chain, group
from tests.conftest import start_worker, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_dependent_added_while_its_dependency_finishes_is_never_left_waiting():
    """The enqueue flags the dependency (a row lock) and the completion's trigger reads the edges with
    a snapshot of its own: whichever commits first, the dependent ends PENDING."""
    outcomes = []
    for _ in range(40):
        first = Job.objects.enqueue("test.noop")
        run = Job.objects.claim("w1")
        assert run is not None and run.id == first
        start = threading.Barrier(2)
        added: list[int] = []

        def complete(run=run, start=start):
            try:
                start.wait()
                assert Job.objects.complete(run.id, "w1", "ok", fence=run.fence)
            finally:
                connections.close_all()

        def add(first=first, start=start, added=added):
            try:
                start.wait()
                added.append(Job.objects.enqueue("test.noop", depends_on=[first]))
            finally:
                connections.close_all()

        threads = [threading.Thread(target=complete), threading.Thread(target=add)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        dependent = Job.objects.get(id=added[0])
        outcomes.append((dependent.status, dependent.waiting_on))
        Job.objects.filter(id__in=[first, dependent.id]).delete()
    assert set(outcomes) == {(JobStatus.PENDING, 0)}


def test_a_chain_and_a_group_drain_through_real_workers_woken_by_the_trigger():
    summary = Signature("test.dependency_summary", {})
    steps = chain(Signature("test.echo", {"step": 1}), Signature("test.echo", {"step": 2}), summary).enqueue()
    batch = group(*[Signature("test.echo", {"n": n}) for n in range(4)], then=summary).enqueue()
    workers = [start_worker("--queues", "default:2", env={"JOBQ_POLL_INTERVAL": "60"}) for _ in range(2)]
    try:
        wait_until(
            lambda: steps.status().finished and batch.status().finished,
            timeout=60,
            message="both workflows finished (without a minute's poll per released job)",
        )
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    assert steps.status().succeeded and batch.status().succeeded
    first, second, last = (Job.objects.get(id=i) for i in steps.job_ids)
    assert first.finished_at <= second.started_at and second.finished_at <= last.started_at
    assert last.result == [[second.id, "DONE", {"step": 2}]]
    *members, callback = (Job.objects.get(id=i) for i in batch.job_ids)
    assert callback.attempts == 1 and callback.started_at >= max(m.finished_at for m in members)
    assert callback.result == [[m.id, "DONE", {"n": n}] for n, m in enumerate(members)]


@pytest.mark.parametrize(
    "lanes", [{"default": 2}, {"default": 1, "emails": 1}], ids=["one lane", "two lanes"]
)
def test_a_burst_worker_runs_a_whole_workflow_before_it_exits(worker_thread, lanes):
    """Each step is released by the statement that completes the one before it, which is also the
    statement that claims: a burst worker claims again (every lane, whichever queue the next step is
    in) before it concludes that nothing is due."""
    last_queue = list(lanes)[-1]
    flow = chain(
        Signature("test.noop", {"step": "charge"}),
        group(
            Signature("test.noop", {"step": "receipt"}, queue=last_queue),
            Signature("test.noop", {"step": "invoice"}),
        ),
        Signature("test.noop", {"step": "notify"}, queue=last_queue),
    ).enqueue(name="order")
    worker = worker_thread(lanes, burst=True)
    wait_until(worker.finished.is_set, timeout=60, message="the burst worker exited")
    steps = Job.objects.filter(workflow_id=flow.id)
    assert sorted(steps.values_list("status", flat=True)) == [JobStatus.DONE] * 4, flow.status().counts
