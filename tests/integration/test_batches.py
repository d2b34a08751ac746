"""Batch tasks (django_jobq.batches) run by a real worker against a real PostgreSQL: many jobs in one
call, each job keeping its own attempts, outcome and dead letter."""

from collections import defaultdict

import pytest

from django_jobq import Batch, ConfigurationError, task
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from tests.conftest import wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
FAST = {"HEARTBEAT_SECONDS": 0.2, "POLL_INTERVAL": 0.2, "LEASE_SECONDS": 5}


@pytest.fixture(autouse=True)
def _fast(settings):
    settings.JOBQ = {**settings.JOBQ, **FAST}


def calls() -> dict[str, list[int]]:
    """The jobs of each call, by call id."""
    seen: dict[str, list[int]] = defaultdict(list)
    for job_id, worker in Execution.objects.values_list("job_id", "worker_id"):
        seen[worker.rsplit("|", 1)[1]].append(job_id)
    return seen


def enqueue(task_name: str, payloads: list[dict]) -> list[int]:
    return Job.objects.enqueue_many([NewJob(task_name, payload, queue="batches") for payload in payloads])


def all_ended(ids: list[int]) -> bool:
    return not Job.objects.filter(id__in=ids, status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists()


@pytest.mark.p0
def test_due_jobs_run_many_to_a_call_each_with_its_own_result(worker_thread):
    ids = enqueue("test.batch", [{"n": n} for n in range(250)])
    worker_thread({"batches": 1})
    wait_until(lambda: all_ended(ids), message="every job ended")
    jobs = {job.id: job for job in Job.objects.filter(id__in=ids)}
    assert {job.status for job in jobs.values()} == {JobStatus.DONE}
    assert all(jobs[i].result == {"n": n} and jobs[i].attempts == 1 for n, i in enumerate(ids))
    sizes = sorted((len(members) for members in calls().values()), reverse=True)
    assert sum(sizes) == 250 and sizes[0] == 100 and max(sizes) <= 100  # each job once, at most size a call
    assert len(sizes) <= 10


@pytest.mark.p0
def test_the_jobs_a_call_fails_are_retried_alone_and_the_others_done_once(worker_thread):
    failing = {3, 50, 99}
    ids = enqueue("test.batch", [{"n": n, "fail_attempts": int(n in failing)} for n in range(100)])
    worker_thread({"batches": 1})
    wait_until(lambda: all_ended(ids), message="every job ended")
    runs = defaultdict(list)
    for job_id, attempt in Execution.objects.values_list("job_id", "attempt"):
        runs[job_id].append(attempt)
    for n, job_id in enumerate(ids):
        job = Job.objects.get(pk=job_id)
        assert job.status == JobStatus.DONE and job.result == {"n": n}
        if n in failing:
            assert sorted(runs[job_id]) == [1, 2] and job.attempts == 2
            assert f"job {n} was refused by the provider" in job.errors[0]["error"]
            assert job.errors[0]["class"] == "builtins.ValueError"
        else:
            assert runs[job_id] == [1] and job.attempts == 1 and not job.errors


@pytest.mark.p0
def test_an_exception_that_escapes_the_call_fails_every_job_of_it_once(worker_thread):
    ids = enqueue("test.batch", [{"n": n, "explode": True} for n in range(30)])
    Job.objects.filter(id__in=ids).update(max_attempts=1)
    worker_thread({"batches": 1})
    wait_until(lambda: all_ended(ids), message="every job ended")
    for job in Job.objects.filter(id__in=ids):
        assert job.status == JobStatus.DEAD and job.attempts == 1
        assert "RuntimeError: the provider is down" in job.last_error
    assert Execution.objects.count() == 30


@pytest.mark.p1
def test_one_result_that_is_not_json_fails_that_job_only(worker_thread):
    ids = enqueue("test.batch", [{"n": n, "bad": n == 7} for n in range(10)])
    Job.objects.filter(id=ids[7]).update(max_attempts=1)
    worker_thread({"batches": 1})
    wait_until(lambda: all_ended(ids), message="every job ended")
    statuses = dict(Job.objects.filter(id__in=ids).values_list("id", "status"))
    assert statuses.pop(ids[7]) == JobStatus.DEAD
    assert set(statuses.values()) == {JobStatus.DONE}
    assert "JSON" in Job.objects.get(pk=ids[7]).last_error


@pytest.mark.p1
@pytest.mark.parametrize(
    ("answer", "status", "error"),
    [
        ("none", JobStatus.DONE, None),
        ("empty", JobStatus.DEAD, "the batch task's answer names no outcome for job"),
        ("list", JobStatus.DEAD, "a batch task returns None or a mapping of job id to outcome, not list"),
        ("strangers", JobStatus.DONE, None),
    ],
)
def test_an_answer_that_misses_jobs_or_is_no_mapping_fails_the_jobs_concerned(
    worker_thread, answer, status, error
):
    ids = enqueue("test.batch_answers", [{"answer": answer} for _ in range(4)])
    worker_thread({"batches": 1})
    wait_until(lambda: all_ended(ids), message="every job ended")
    for job in Job.objects.filter(id__in=ids):
        assert job.status == status, job.last_error
        if error:
            assert error in job.last_error
        else:
            assert job.result == (None if answer == "none" else "ok")


@pytest.mark.p0
def test_a_batch_key_keeps_jobs_of_different_values_apart(worker_thread):
    providers = ["mailgun", "postmark", None, "mailgun", "postmark", "ses"] * 20
    payloads = [{} if p is None else {"provider": p} for p in providers]
    ids = enqueue("test.batch_keyed", payloads)
    worker_thread({"batches": 2})
    wait_until(lambda: all_ended(ids), message="every job ended")
    provider_of = dict(zip(ids, providers, strict=True))
    for members in calls().values():
        assert len({provider_of[i] for i in members}) == 1, members
    results = dict(Job.objects.filter(id__in=ids).values_list("id", "result"))
    assert results == provider_of


@pytest.mark.p1
def test_a_batch_waits_to_fill_once_its_first_job_is_claimed(worker_thread):
    first = enqueue("test.batch_fill", [{}])
    worker_thread({"batches": 1})
    wait_until(lambda: Job.objects.get(pk=first[0]).status == JobStatus.RUNNING, message="the first claimed")
    more = enqueue("test.batch_fill", [{} for _ in range(4)])
    wait_until(lambda: all_ended(first + more), message="the batch ran")
    assert list(calls().values()) == [first + more] or sorted(next(iter(calls().values()))) == sorted(
        first + more
    )
    assert Job.objects.filter(id__in=first + more, status=JobStatus.DONE).count() == 5


@pytest.mark.p0
def test_a_cancel_of_one_job_of_a_running_batch_ends_it_alone(worker_thread):
    ids = enqueue("test.batch_hold", [{"seconds": 60} for _ in range(10)])
    worker_thread({"batches": 1})
    wait_until(lambda: Execution.objects.count() == 10, message="the batch started")
    assert Job.objects.cancel(ids[4])
    wait_until(lambda: all_ended(ids), message="the batch ended")
    statuses = dict(Job.objects.filter(id__in=ids).values_list("id", "status"))
    assert statuses.pop(ids[4]) == JobStatus.CANCELLED
    assert set(statuses.values()) == {JobStatus.DONE}
    assert set(Job.objects.filter(id__in=ids).exclude(id=ids[4]).values_list("result", flat=True)) == {
        "finished"
    }


@pytest.mark.p1
def test_an_async_batch_task_runs_its_jobs_in_one_await(worker_thread):
    ids = enqueue("test.batch_async", [{"n": n} for n in range(20)])
    worker_thread({"batches": 1})
    wait_until(lambda: all_ended(ids), message="every job ended")
    assert dict(Job.objects.filter(id__in=ids).values_list("id", "result")) == dict(
        zip(ids, range(20), strict=True)
    )
    assert max(len(m) for m in calls().values()) == 20


@pytest.mark.p1
def test_a_capped_queue_counts_every_job_of_a_batch(worker_thread, settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"batches": {"MAX_RUNNING": 7}}}
    ids = enqueue("test.batch", [{"n": n} for n in range(40)])
    worker_thread({"batches": 1})
    wait_until(lambda: all_ended(ids), message="every job ended")
    assert max(len(m) for m in calls().values()) == 7  # the cap, not the batch's size of 100


@pytest.mark.p0
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"size": 0}, "Batch size must be an integer in"),
        ({"size": 1_000_000}, "Batch size must be an integer in"),
        ({"size": True}, "Batch size must be an integer in"),
        ({"wait": -1}, "Batch wait must be seconds in"),
        ({"wait": float("nan")}, "Batch wait must be seconds in"),
        ({"wait": 10_000}, "Batch wait must be seconds in"),
        ({"key": "provider'; DROP TABLE jobq_job; --"}, "Batch key must be the name of a payload field"),
        ({"key": "a\x00b"}, "Batch key must be the name of a payload field"),
        ({"key": 12}, "Batch key must be the name of a payload field"),
    ],
)
def test_bad_batch_options_are_refused_at_definition(options, message):
    with pytest.raises(ConfigurationError, match=message):
        Batch(**options)


@pytest.mark.p0
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"atomic": True}, "cannot be atomic"),
        ({"takes_context": True}, "takes no context"),
        ({"max_running": 2}, "takes no max_running"),
        ({"max_running_per_key": 2}, "takes no max_running"),
        ({"batch": {"size": 10}}, "batch must be a django_jobq.Batch"),
    ],
)
def test_a_batch_task_refuses_options_it_cannot_keep(options, message):
    options = {"batch": Batch(size=10), **options}
    with pytest.raises(ConfigurationError, match=message):
        task(name="test.refused_batch", **options)(lambda jobs: None)


@pytest.mark.p1
def test_a_batch_members_dependents_are_released_as_it_finishes(worker_thread):
    from django_jobq.workflows import chain, group
    from tests.testapp.batch_tasks import batch

    first = group(*[batch.s(n=n) for n in range(5)], then=batch.s(n=100)).enqueue(name="batch flow")
    then = chain(batch.s(n=200), batch.s(n=201)).enqueue(name="batch chain")
    ids = [*first.job_ids, *then.job_ids]
    worker_thread({"batches": 1}, burst=True)
    wait_until(lambda: all_ended(ids), message="both workflows ran")
    assert set(Job.objects.filter(id__in=ids).values_list("status", flat=True)) == {JobStatus.DONE}
    assert Job.objects.get(pk=first.job_ids[-1]).result == {"n": 100}


@pytest.mark.p1
@pytest.mark.parametrize("lanes", [{"batches": 1}, {"*": 1}])
def test_a_pause_of_its_queue_ends_a_batchs_gathering_and_it_runs_with_what_it_has(worker_thread, lanes):
    first = enqueue("test.batch_fill", [{}])  # a batch of 5 that waits up to a minute to fill
    worker_thread(lanes)
    wait_until(lambda: Job.objects.get(pk=first[0]).status == JobStatus.RUNNING, message="the first claimed")
    Job.objects.pause_queue("batches")
    wait_until(lambda: all_ended(first), message="the batch ran without waiting out its minute")
    later = enqueue("test.batch_fill", [{} for _ in range(4)])
    assert list(calls().values()) == [first]
    assert set(Job.objects.filter(id__in=later).values_list("status", flat=True)) == {JobStatus.PENDING}


@pytest.mark.p1
def test_signals_and_so_metrics_speak_of_each_job_of_a_batch(worker_thread):
    from django_jobq import signals

    seen: dict[str, list[int]] = defaultdict(list)

    def hook(name):
        def receive(sender=None, job=None, **kwargs):
            seen[name].append(job.id)

        return receive

    receivers = {name: hook(name) for name in ("job_started", "job_succeeded", "job_retried")}
    for name, receiver in receivers.items():
        getattr(signals, name).connect(receiver, weak=False)
    try:
        ids = enqueue("test.batch", [{"n": n, "fail_attempts": int(n < 3)} for n in range(20)])
        worker_thread({"batches": 1})
        wait_until(lambda: all_ended(ids), message="every job ended")
        wait_until(lambda: len(seen["job_succeeded"]) == 20, message="every success reported")
    finally:
        for name, receiver in receivers.items():
            getattr(signals, name).disconnect(receiver)
    assert sorted(seen["job_succeeded"]) == sorted(ids)
    assert sorted(seen["job_retried"]) == sorted(ids[:3])
    assert sorted(seen["job_started"]) == sorted(ids + ids[:3])  # one start per job and attempt
