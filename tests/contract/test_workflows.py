"""Workflows on every engine: jobs that wait for others (WAITING until every dependency is DONE),
what a failed dependency does to its dependents (cancelled transitively, or run anyway), a requeue's
revival, chains and groups, a job's view of its dependencies, pruning, and the refusals."""

import datetime as dt

import pytest
import time_machine
from django.db import transaction

from django_jobq import CancelOutcome
from django_jobq.context import JobContext
from django_jobq.exceptions import DependencyFailed, DependencyNotFound, InvalidJob, WorkflowTooLarge
from django_jobq.managers import NewJob
from django_jobq.managers.graphs import MAX_DEPENDENCIES, GraphNode
from django_jobq.models import Dependency, Job, JobStatus, Workflow
from django_jobq.workflows import Signature, chain, group
from django_jobq.workflows.compose import MAX_NESTING

pytestmark = [pytest.mark.contract, pytest.mark.django_db]

S = JobStatus
T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)


def state(*ids: int) -> list[tuple[int, int]]:
    rows = dict(Job.objects.filter(id__in=ids).values_list("id", "status"))
    return [rows.get(i) for i in ids]


def run_next(worker: str = "w1", *, fail: bool = False) -> int:
    """Claim the next due job and finish it (DONE, or DEAD at once)."""
    job = Job.objects.claim(worker)
    assert job is not None, "nothing due"
    if fail:
        Job.objects.fail(job.id, worker, "boom", permanent=True, fence=job.fence)
    else:
        assert Job.objects.complete(job.id, worker, {"from": job.id}, fence=job.fence)
    return job.id


def test_a_job_waits_until_every_dependency_is_done_and_is_never_claimed_before():
    a, b = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop")
    c = Job.objects.enqueue("test.noop", depends_on=[a, b])
    assert state(c) == [S.WAITING] and Job.objects.get(id=c).waiting_on == 2
    assert {run_next(), run_next()} == {a, b}  # c is never among the claimed
    assert state(c) == [S.PENDING]  # the statement that completed b released it
    assert run_next() == c
    assert Job.objects.claim("w1") is None


def test_a_batch_of_completions_releases_a_dependent_once_however_many_of_its_dependencies_it_completes():
    a, b = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop")
    c = Job.objects.enqueue("test.noop", depends_on=[a, b])
    runs = {job.id: job.fence for job in Job.objects.claim_batch("w1", 2)}
    assert set(runs) == {a, b}
    assert Job.objects.complete_many("w1", [(a, runs[a], "1"), (b, runs[b], "2")]).done == {a, b}
    job = Job.objects.get(id=c)
    assert (job.status, job.waiting_on) == (S.PENDING, 0)
    assert set(Dependency.objects.filter(dependent_id=c).values_list("resolved", flat=True)) == {True}


def test_a_dead_dependency_cancels_its_dependents_transitively_and_a_run_policy_one_runs_anyway():
    a = Job.objects.enqueue("test.noop")
    b = Job.objects.enqueue("test.noop", depends_on=[a])
    c = Job.objects.enqueue("test.noop", depends_on=[b])
    runs_anyway = Job.objects.enqueue("test.noop", depends_on=[a], on_dependency_failure="run")
    assert run_next(fail=True) == a
    assert state(a, b, c, runs_anyway) == [S.DEAD, S.CANCELLED, S.CANCELLED, S.PENDING]
    for cancelled in (b, c):
        job = Job.objects.get(id=cancelled)
        assert job.cancelled_by == f"dependency:{a}"
        assert job.last_error == f"cancelled: job {a}, which it depends on, ended DEAD"
        assert job.finished_at == Job.objects.get(id=a).finished_at  # ended with it (not at BEGIN)


def test_cancelling_a_waiting_job_cancels_it_at_once_and_its_dependents_with_it():
    a = Job.objects.enqueue("test.noop")
    b = Job.objects.enqueue("test.noop", depends_on=[a])
    c = Job.objects.enqueue("test.noop", depends_on=[b])
    assert Job.objects.cancel(b, by="ops") is CancelOutcome.CANCELLED
    assert state(a, b, c) == [S.PENDING, S.CANCELLED, S.CANCELLED]
    assert Job.objects.get(id=c).cancelled_by == f"dependency:{b}"
    assert run_next() == a and Job.objects.claim("w1") is None


def test_requeueing_a_dead_dependency_revives_what_its_failure_cancelled():
    a, other = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop", priority=200)
    b = Job.objects.enqueue("test.noop", depends_on=[a])
    c = Job.objects.enqueue("test.noop", depends_on=[b, other])
    assert run_next(fail=True) == a
    assert state(b, c) == [S.CANCELLED, S.CANCELLED]
    assert Job.objects.requeue(a)
    assert state(a, b, c) == [S.PENDING, S.WAITING, S.WAITING]
    assert [Job.objects.get(id=i).waiting_on for i in (b, c)] == [1, 2]  # c waits for other again too
    assert run_next() == a and run_next() == b
    assert state(c) == [S.WAITING]
    assert run_next() == other and state(c) == [S.PENDING]


def test_a_revival_leaves_cancelled_what_another_failure_blocks():
    a, z = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop", priority=200)
    b = Job.objects.enqueue("test.noop", depends_on=[a])
    c = Job.objects.enqueue("test.noop", depends_on=[b])
    d = Job.objects.enqueue("test.noop", depends_on=[c, z])
    run_next(fail=True)  # a: b, c, d cancelled
    assert Job.objects.cancel(z) is CancelOutcome.CANCELLED
    assert Job.objects.requeue(a)
    assert state(b, c, d) == [S.WAITING, S.WAITING, S.CANCELLED]  # d still has a failed dependency (z)


@pytest.mark.parametrize("order", ["first failed first", "first failed last"])
def test_requeueing_a_groups_failed_members_one_at_a_time_revives_its_callback_in_either_order(order):
    """The callback was cancelled by the first member to fail; the second's failure found it cancelled
    already. Whichever member is requeued last (one at a time, as the admin's requeue of one job does)
    revives it, once neither has failed any more."""
    flow = group(
        Signature("test.noop", {}), Signature("test.noop", {}), then=Signature("test.noop", {}),
        then_on_failure="cancel",
    ).enqueue(name="members")  # fmt: skip
    first, second, callback = flow.job_ids
    assert run_next(fail=True) == first and run_next(fail=True) == second
    assert Job.objects.get(id=callback).cancelled_by == f"dependency:{first}"
    for member in (first, second) if order == "first failed first" else (second, first):
        assert Job.objects.requeue(member)
    assert state(callback) == [S.WAITING]
    assert {run_next(), run_next()} == {first, second}
    assert run_next() == callback and state(callback) == [S.DONE]


def test_a_dependency_added_to_a_finished_job_counts_as_resolved():
    a = Job.objects.enqueue("test.noop")
    run_next()
    b = Job.objects.enqueue("test.noop", depends_on=[a])
    assert state(b) == [S.PENDING]
    assert Dependency.objects.get(dependent_id=b).resolved


def test_a_chain_runs_in_order_and_each_step_reads_the_previous_result():
    workflow = chain(
        Signature("test.noop", {}), Signature("test.noop", {}), Signature("test.noop", {})
    ).enqueue(name="steps")
    first, second, third = workflow.job_ids
    assert Workflow.objects.get(id=workflow.id).name == "steps"
    assert set(Job.objects.filter(workflow_id=workflow.id).values_list("id", flat=True)) == {
        first,
        second,
        third,
    }
    assert state(first, second, third) == [S.PENDING, S.WAITING, S.WAITING]
    assert workflow.status().state == "running"
    assert run_next() == first and run_next() == second
    context = JobContext(job_id=third, task="test.noop", attempt=1, max_attempts=1, worker_id="w1", fence=1)
    (previous,) = context.dependency_results()
    assert (previous.job_id, previous.status, previous.result, previous.succeeded) == (
        second,
        "DONE",
        {"from": second},
        True,
    )
    assert run_next() == third
    status = workflow.status()
    assert status.finished and status.succeeded and status.counts == {"DONE": 3}


def test_a_groups_callback_runs_once_after_every_member_finished_succeeded_or_not():
    workflow = group(
        *[Signature("test.noop", {"n": n}) for n in range(3)], then=Signature("test.noop", {})
    ).enqueue()
    *members, callback = workflow.job_ids
    assert Job.objects.get(id=callback).waiting_on == 3
    run_next(fail=True)
    run_next()
    assert state(callback) == [S.WAITING]
    run_next()
    assert state(callback) == [S.PENDING]  # its policy is "run": a failed member does not cancel it
    context = JobContext(
        job_id=callback, task="test.noop", attempt=1, max_attempts=1, worker_id="w1", fence=1
    )
    results = context.dependency_results()
    assert [r.job_id for r in results] == members
    assert sum(r.succeeded for r in results) == 2 and results[0].error == "boom"
    assert run_next() == callback and Job.objects.claim("w1") is None
    assert workflow.status().state == "failed"


def test_a_group_inside_a_chain_waits_for_the_step_before_and_holds_up_the_one_after():
    workflow = chain(
        Signature("test.noop", {"step": "charge"}),
        group(Signature("test.noop", {"step": "receipt"}), Signature("test.noop", {"step": "invoice"})),
        Signature("test.noop", {"step": "notify"}),
    ).enqueue(name="order 42")
    charge, receipt, invoice, notify = workflow.job_ids
    after = {
        job: set(Dependency.objects.filter(dependent_id=job).values_list("dependency_id", flat=True))
        for job in workflow.job_ids
    }
    assert after == {charge: set(), receipt: {charge}, invoice: {charge}, notify: {receipt, invoice}}
    run_next(fail=True)  # charge failed: the whole rest is cancelled
    assert state(receipt, invoice, notify) == [S.CANCELLED] * 3
    assert workflow.status().finished


def test_cancelling_a_workflow_cancels_every_unfinished_job():
    workflow = chain(Signature("test.noop", {}), Signature("test.noop", {})).enqueue()
    claimed = Job.objects.claim("w1")
    counts = workflow.cancel(by="ops")
    assert (counts.cancelled, counts.requested) == (1, 1)
    assert state(*workflow.job_ids) == [S.RUNNING, S.CANCELLED]
    assert Job.objects.complete(claimed.id, "w1", None, fence=claimed.fence)
    assert state(*workflow.job_ids) == [S.CANCELLED, S.CANCELLED]


def test_cancelling_a_large_group_never_releases_its_run_callback_between_batches(monkeypatch):
    """cancel_many works in batches, each its own statement: had the members gone first, a batch that
    cancelled the last of them would have released the "run" callback, for any worker to claim before
    the next batch cancelled it. A claim between every two batches finds nothing to run."""
    from django_jobq.managers import control

    monkeypatch.setattr(control, "CANCEL_BATCH", 3)
    callback_step = Signature("test.noop", {}, queue="callbacks")
    workflow = group(*(Signature("test.noop", {"n": n}) for n in range(6)), then=callback_step).enqueue()
    *members, callback = workflow.job_ids
    intruded: list[int | None] = []
    batch = control.ControlManager._cancel

    def then_claim(self, *args, **kwargs):
        rows = batch(self, *args, **kwargs)
        claimed = Job.objects.claim("intruder", queues=["callbacks"])  # a worker of the callback's queue
        intruded.append(None if claimed is None else claimed.id)
        return rows

    monkeypatch.setattr(control.ControlManager, "_cancel", then_claim)
    workflow.cancel(by="ops")
    assert callback not in intruded
    assert state(*members, callback) == [S.CANCELLED] * 7
    assert Job.objects.get(id=callback).started_at is None


def test_enqueue_many_takes_dependencies_and_counts_show_waiting_jobs():
    a = Job.objects.enqueue("test.noop")
    ids = Job.objects.enqueue_many([NewJob("test.noop", depends_on=[a]), NewJob("test.noop")])
    assert state(*ids) == [S.WAITING, S.PENDING]
    assert Job.objects.counts()["WAITING"] == 1


def test_a_dependency_stays_while_its_dependent_is_unfinished_and_a_workflow_is_pruned_together(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        a = Job.objects.enqueue("test.noop")
        b = Job.objects.enqueue("test.noop", depends_on=[a])
        run_next()
        clock.shift(3600)
        assert Job.objects.prune(S.DONE, older_than=60, batch=10) == 0  # b has yet to read a's result
        run_next()
        clock.shift(3600)
        assert Job.objects.prune(S.DONE, older_than=60, batch=10) == 2
        assert not Dependency.objects.filter(dependent_id=b).exists()  # the edges went with b

        workflow = group(Signature("test.noop", {}), Signature("test.noop", {"slow": True})).enqueue()
        run_next()
        clock.shift(3600)
        assert Job.objects.prune(S.DONE, older_than=60, batch=10) == 0  # its sibling is unfinished
        run_next()
        clock.shift(3600)
        assert Job.objects.prune(S.DONE, older_than=60, batch=10) == 2
        assert not Job.objects.filter(workflow_id=workflow.id).exists()


def nothing_written(action) -> None:
    before = (Job.objects.count(), Dependency.objects.count(), Workflow.objects.count())
    action()
    assert (Job.objects.count(), Dependency.objects.count(), Workflow.objects.count()) == before


def test_bad_dependencies_are_refused_before_anything_is_written():
    a = Job.objects.enqueue("test.noop")
    for bad, error in [
        ([10**12], DependencyNotFound),
        ([a, 10**12], DependencyNotFound),
        ("1,2", InvalidJob),
        ([True], InvalidJob),
        ([0], InvalidJob),
        ([-1], InvalidJob),
        ([2**63], InvalidJob),
        (list(range(1, MAX_DEPENDENCIES + 2)), WorkflowTooLarge),
        (list(range(1, 100_001)), WorkflowTooLarge),
    ]:

        def enqueue(bad=bad, error=error):
            with pytest.raises(error):
                Job.objects.enqueue("test.noop", depends_on=bad)

        nothing_written(enqueue)
    with pytest.raises(InvalidJob, match="dedupe"):
        Job.objects.enqueue("test.noop", depends_on=[a], dedupe_key="k")
    with pytest.raises(InvalidJob, match="on_dependency_failure"):
        Job.objects.enqueue("test.noop", depends_on=[a], on_dependency_failure="ignore")
    assert not Job.objects.get(id=a).has_dependents  # the refused calls flagged nothing


def test_a_dependency_that_already_failed_is_refused_unless_the_job_runs_anyway():
    a = Job.objects.enqueue("test.noop")
    run_next(fail=True)
    with pytest.raises(DependencyFailed, match="already ended DEAD"):
        Job.objects.enqueue("test.noop", depends_on=[a])
    b = Job.objects.enqueue("test.noop", depends_on=[a], on_dependency_failure="run")
    assert state(b) == [S.PENDING]


def test_a_graph_cannot_hold_a_cycle_and_hostile_shapes_are_refused():
    for after in [(1,), (2,), (-1,), ("0",), (True,)]:  # itself, a later job, not an index
        with pytest.raises(InvalidJob, match="placed before it"):
            Job.objects.enqueue_graph(
                [GraphNode("test.noop"), GraphNode("test.noop", after=after), GraphNode("test.noop")]
            )
    nested = Signature("test.noop", {})
    for _ in range(MAX_NESTING + 1):
        nested = chain(nested)
    with pytest.raises(WorkflowTooLarge, match="nested"):
        nested.enqueue()
    big = "x" * (250 * 1024)  # under the payload limit each, over the workflow's 8 MiB together
    with pytest.raises(WorkflowTooLarge, match="bytes"):
        group(*[Signature("test.noop", {"blob": big}) for _ in range(40)]).enqueue()
    with pytest.raises(InvalidJob, match="NUL"):
        chain(Signature("test.noop", {})).enqueue(name="bad\x00name")
    with pytest.raises(InvalidJob, match="signature"):
        chain("test.noop").enqueue()
    with pytest.raises(InvalidJob):
        group()
    assert Job.objects.count() == 0 and Workflow.objects.count() == 0


def test_a_workflow_is_enqueued_in_the_callers_transaction():
    try:
        with transaction.atomic():
            chain(Signature("test.noop", {}), Signature("test.noop", {})).enqueue()
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert Job.objects.count() == 0 and Dependency.objects.count() == 0 and Workflow.objects.count() == 0


@pytest.mark.parametrize("how", ["queryset", "instance"])
def test_deleting_an_unfinished_dependency_settles_its_dependents_as_a_cancel_would(how):
    """None is left waiting for a job that is gone: those to be cancelled by a failed dependency are
    CANCELLED, transitively, and never revived by another requeue; the others stop waiting for it."""
    a, other = Job.objects.enqueue("test.noop"), Job.objects.enqueue("test.noop", priority=200)
    cancelled = Job.objects.enqueue("test.noop", depends_on=[a, other])
    after_it = Job.objects.enqueue("test.noop", depends_on=[cancelled])
    runs_anyway = Job.objects.enqueue("test.noop", depends_on=[a], on_dependency_failure="run")
    if how == "queryset":
        Job.objects.filter(id=a).delete()
    else:
        Job.objects.get(id=a).delete()
    assert state(cancelled, after_it, runs_anyway) == [S.CANCELLED, S.CANCELLED, S.PENDING]
    job = Job.objects.get(id=cancelled)
    assert (job.cancelled_by, job.last_error) == (
        f"deleted:{a}",
        f"cancelled: job {a}, which it depends on, was deleted",
    )
    assert run_next() == runs_anyway
    run_next(fail=True)  # other fails, then is requeued: the deleted job's dependents stay cancelled
    assert Job.objects.requeue(other)
    assert state(cancelled, after_it) == [S.CANCELLED, S.CANCELLED]
