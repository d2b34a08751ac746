"""claim_for_batch, the claim of a batch's further jobs (django_jobq.batches), on every engine: only its
task's due jobs, only those of its key, in claim order, at most its limit, each with a new fence."""

import datetime as dt

import pytest

from django_jobq import InvalidJob
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.p0, pytest.mark.django_db]


def test_it_takes_only_the_tasks_due_jobs_in_claim_order_up_to_its_limit():
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    mine = Job.objects.enqueue_many([NewJob("test.batch", {"n": n}, queue="batches") for n in range(5)])
    Job.objects.enqueue("test.batch", {"n": 99}, queue="batches", run_at=later)  # not due
    Job.objects.enqueue("test.batch", {"n": 98}, queue="elsewhere")  # another queue
    other = Job.objects.enqueue("test.noop", queue="batches")  # another task
    urgent = Job.objects.enqueue("test.batch", {"n": -1}, queue="batches", priority=1)
    taken = Job.objects.claim_for_batch("w1", "batches", "test.batch", 4)
    assert [job.id for job in taken] == [urgent, *mine[:3]]
    for job in taken:
        assert (job.status, job.worker_id, job.attempts, job.fence) == (JobStatus.RUNNING, "w1", 1, 1)
    rest = Job.objects.claim_for_batch("w1", "batches", "test.batch", 100)
    assert [job.id for job in rest] == mine[3:]
    assert Job.objects.get(pk=other).status == JobStatus.PENDING


def test_a_key_takes_only_the_jobs_whose_field_holds_its_value_a_missing_field_reading_as_null():
    payloads = [{"p": "a"}, {"p": "b"}, {}, {"p": None}, {"p": "a", "x": 1}, {"p": {"deep": [1]}}, {"p": 1}]
    ids = Job.objects.enqueue_many([NewJob("test.batch_keyed", p, queue="batches") for p in payloads])

    def take(value):
        return [j.id for j in Job.objects.claim_for_batch("w1", "batches", "test.batch_keyed", 50, field="p",
                                                          value=value)]  # fmt: skip

    assert take("a") == [ids[0], ids[4]]
    assert take(None) == [ids[2], ids[3]]
    assert take({"deep": [1]}) == [ids[5]]
    assert take("1") == []  # the string, not the number
    assert take(1) == [ids[6]]
    assert take("b") == [ids[1]]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"value": "a\x00b", "field": "p"}, "NUL"),
        ({"value": "\ud800", "field": "p"}, "surrogate"),
        ({"limit": 0}, "limit"),
        ({"queue": "*"}, "not a queue name"),
        ({"task": " padded "}, "task name"),
    ],
)
def test_hostile_arguments_are_refused_before_anything_is_claimed(arguments, error):
    job_id = Job.objects.enqueue("test.batch", {"p": "a"}, queue="batches")
    call = {"worker_id": "w1", "queue": "batches", "task": "test.batch", "limit": 10, **arguments}
    with pytest.raises(InvalidJob, match=error):
        Job.objects.claim_for_batch(**call)
    assert Job.objects.get(pk=job_id).status == JobStatus.PENDING
