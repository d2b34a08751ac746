"""Invalid arguments are refused at the call with a JobqError, and nothing is written."""

import datetime as dt
import functools
import math

import pytest

from django_jobq import InvalidJob, InvalidPayload, JobqError, PayloadMismatch, PayloadTooLarge, UnknownTask
from django_jobq.managers import NewJob
from django_jobq.models import Job

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"payload": {"when": dt.datetime(2026, 1, 1)}}, InvalidPayload, "not JSON serialisable"),
        ({"payload": {"x": {1, 2}}}, InvalidPayload, "set is not JSON"),
        ({"payload": {"x": math.nan}}, InvalidPayload, "JSON"),
        ({"payload": {1: "int key"}}, InvalidPayload, "not a string"),
        ({"payload": ["not", "an", "object"]}, InvalidPayload, "JSON object"),
        ({"payload": {"blob": "x" * 300_000}}, PayloadTooLarge, "limit is"),
        ({"delay": -1}, InvalidJob, "delay"),
        ({"delay": dt.timedelta(seconds=-5)}, InvalidJob, "delay"),
        ({"run_at": dt.datetime(2026, 1, 1)}, InvalidJob, "timezone-aware"),
        ({"priority": 40_000}, InvalidJob, "priority"),
        ({"priority": "high"}, InvalidJob, "priority"),
        ({"queue": ""}, InvalidJob, "queue"),
        ({"queue": "   "}, InvalidJob, "queue"),
        ({"max_attempts": 0}, InvalidJob, "max_attempts"),
        ({"dedupe_key": ""}, InvalidJob, "dedupe_key"),
        ({"payload": {"text": "a\x00b"}}, InvalidPayload, "NUL"),
        ({"payload": {"a\x00": 1}}, InvalidPayload, "NUL"),
        ({"payload": {"text": "\ud800"}}, InvalidPayload, "surrogate"),
        (
            {"payload": {"deep": functools.reduce(lambda a, _: [a], range(5000), [])}},
            InvalidPayload,
            "nested",
        ),
        ({"payload": {"n": 10**5000}}, InvalidPayload, "JSON"),
        ({"queue": "emails\x00"}, InvalidJob, "NUL"),
        ({"queue": "\ud800"}, InvalidJob, "surrogate"),
        ({"dedupe_key": "k\x00"}, InvalidJob, "NUL"),
        ({"dedupe_key": "\udfff"}, InvalidJob, "surrogate"),
        ({"dedupe_key": "\U0001f600" * 1000}, InvalidJob, "bytes in UTF-8"),  # too big for the index
        ({"delay": 1e300}, InvalidJob, "delay"),
        ({"delay": math.inf}, InvalidJob, "delay"),
    ],
)
def test_bad_enqueue_arguments_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message) as caught:
        Job.objects.enqueue("test.echo", **kwargs)
    assert isinstance(caught.value, JobqError)
    assert not Job.objects.exists()


@pytest.mark.parametrize("task", ["test.echo\x00", "\ud800", "x" * 201])
def test_bad_task_names_are_refused(task):
    with pytest.raises(InvalidJob, match="task"):
        Job.objects.enqueue(task)
    assert not Job.objects.exists()


def test_injection_looking_values_are_stored_as_plain_text(settings):
    settings.JOBQ = {**settings.JOBQ, "STRICT_TASKS": False}
    hostile = "x'); DELETE FROM jobq_job; --"
    jid = Job.objects.enqueue(hostile, {hostile: hostile}, queue=hostile, dedupe_key=hostile)
    job = Job.objects.get(id=jid)
    assert (job.task, job.queue, job.dedupe_key, job.payload) == (
        hostile,
        hostile,
        hostile,
        {hostile: hostile},
    )


def test_a_payload_that_does_not_fit_the_task_is_refused_at_enqueue():
    with pytest.raises(PayloadMismatch, match="unexpected keyword argument 'c'"):
        Job.objects.enqueue("test.takes_two", {"a": 1, "b": 2, "c": 3})
    with pytest.raises(PayloadMismatch, match="missing a required argument: 'b'"):
        Job.objects.enqueue("test.takes_two", {"a": 1})
    assert not Job.objects.exists()
    assert Job.objects.enqueue("test.takes_two", {"a": 1, "b": 2})


def test_unknown_task_is_refused():
    with pytest.raises(UnknownTask, match=r"'no\.such\.task'"):
        Job.objects.enqueue("no.such.task")
    assert not Job.objects.exists()


def test_unknown_task_is_allowed_when_strict_tasks_is_off(settings):
    settings.JOBQ = {**settings.JOBQ, "STRICT_TASKS": False}
    assert Job.objects.enqueue("elsewhere.defined")


def test_payload_limit_is_configurable(settings):
    settings.JOBQ = {**settings.JOBQ, "MAX_PAYLOAD_BYTES": 20}
    assert Job.objects.enqueue("test.echo", {"a": "1234"})
    with pytest.raises(PayloadTooLarge):
        Job.objects.enqueue("test.echo", {"a": "12345678901234567890"})


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (NewJob("test.echo", {"bad": object()}), InvalidPayload),
        (NewJob("test.echo", {"text": "a\x00b"}), InvalidPayload),
        (NewJob("test.echo", {"text": "\ud800"}), InvalidPayload),
        (NewJob("test.echo", {"deep": functools.reduce(lambda a, _: [a], range(5000), [])}), InvalidPayload),
        (NewJob("test.echo", queue="q\x00"), InvalidJob),
        (NewJob("test.echo", dedupe_key="\ud800"), InvalidJob),
        (NewJob("test.echo\x00"), InvalidJob),
        (NewJob("test.takes_two", {"a": 1}), PayloadMismatch),
        (("test.echo", {}), InvalidJob),  # not a NewJob
    ],
)
def test_one_bad_job_in_a_batch_writes_none_and_is_named(bad, error):
    batch = [NewJob("test.echo", {"ok": 1}), NewJob("test.echo", {"ok": 2}), bad, NewJob("test.echo")]
    with pytest.raises(error, match=r"^job 2: ") as caught:
        Job.objects.enqueue_many(batch)
    assert isinstance(caught.value, JobqError)
    assert not Job.objects.exists()


@pytest.mark.parametrize("result", [object(), {"t": "a\x00"}, "\ud800", "x" * (2 * 1024 * 1024)])
def test_unstorable_result_is_refused_and_the_job_stays_running(result):
    jid = Job.objects.enqueue("test.echo")
    Job.objects.claim("w1")
    with pytest.raises(InvalidPayload, match="result"):
        Job.objects.complete(jid, "w1", result=result)
    assert Job.objects.get(id=jid).status == 1


def test_unstorable_error_text_is_stored_escaped():
    jid = Job.objects.enqueue("test.echo", max_attempts=1)
    Job.objects.claim("w1")
    assert Job.objects.fail(jid, "w1", "bad\x00byte and \ud800") == 3
    job = Job.objects.get(id=jid)
    assert job.last_error == "bad\\x00byte and \\ud800" == job.errors[-1]["error"]


def test_claim_arguments_are_checked():
    with pytest.raises(InvalidJob):
        Job.objects.claim_batch("w1", 0)
    with pytest.raises(InvalidJob):
        Job.objects.claim("w1", queues="default")  # a string, not a list
    with pytest.raises(InvalidJob):
        Job.objects.claim("", queues=["default"])
    with pytest.raises(InvalidJob):
        Job.objects.claim("w1", lease_seconds=0)
