"""Invalid arguments are refused at the call with a JobqError, and nothing is written."""

import datetime as dt
import math

import pytest

from django_jobq import InvalidJob, InvalidPayload, JobqError, PayloadTooLarge, UnknownTask
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
    ],
)
def test_bad_enqueue_arguments_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message) as caught:
        Job.objects.enqueue("test.echo", **kwargs)
    assert isinstance(caught.value, JobqError)
    assert not Job.objects.exists()


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


def test_one_bad_job_in_a_batch_writes_none():
    batch = [NewJob("test.echo", {"ok": 1}), NewJob("test.echo", {"bad": object()})]
    with pytest.raises(InvalidPayload):
        Job.objects.enqueue_many(batch)
    assert not Job.objects.exists()


def test_non_json_result_is_refused_and_the_job_stays_running():
    jid = Job.objects.enqueue("test.echo")
    Job.objects.claim("w1")
    with pytest.raises(InvalidPayload, match="result"):
        Job.objects.complete(jid, "w1", result=object())
    assert Job.objects.get(id=jid).status == 1


def test_claim_arguments_are_checked():
    with pytest.raises(InvalidJob):
        Job.objects.claim_batch("w1", 0)
    with pytest.raises(InvalidJob):
        Job.objects.claim("w1", queues="default")  # a string, not a list
    with pytest.raises(InvalidJob):
        Job.objects.claim("", queues=["default"])
    with pytest.raises(InvalidJob):
        Job.objects.claim("w1", lease_seconds=0)
