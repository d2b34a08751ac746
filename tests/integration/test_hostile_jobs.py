"""No single job can stop a lane or a worker: values PostgreSQL cannot store, forged or misfit rows and
raising signal receivers each end the one job concerned (DEAD, with a clear error), nothing more."""

import signal

import pytest
from django.db import connection

from django_jobq import signals
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, WorkerRecord
from django_jobq.worker import Worker
from django_jobq.worker import runner as runner_module
from tests.conftest import start_worker, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db(transaction=True)]

HOSTILE_RESULTS = ["nul", "nul_key", "surrogate", "deep", "huge", "nan"]
HOSTILE_ERRORS = ["nul", "surrogate", "unprintable"]
FORGED_PAYLOADS = {
    "array": "[1, 2]",
    "scalar": "7",
    "misfit": '{"a": 1}',
    "extra": '{"a": 1, "b": 2, "c": 3}',
}


def enqueue_hostile() -> dict[str, int]:
    """One job of each hostile kind; forged rows are written past the producer's checks."""
    ids = {f"result-{k}": Job.objects.enqueue("test.hostile_result", {"kind": k}) for k in HOSTILE_RESULTS}
    ids |= {f"error-{k}": Job.objects.enqueue("test.hostile_error", {"kind": k}) for k in HOSTILE_ERRORS}
    for kind, payload in FORGED_PAYLOADS.items():
        jid = Job.objects.enqueue("test.takes_two", {"a": 1, "b": 2})
        with connection.cursor() as cursor:
            cursor.execute("UPDATE jobq_job SET payload = %s::jsonb WHERE id = %s", [payload, jid])
        ids[f"forged-{kind}"] = jid
    return ids


def assert_dead_with_clear_errors(ids: dict[str, int]) -> None:
    jobs = {name: Job.objects.get(id=jid) for name, jid in ids.items()}
    assert {name: job.status for name, job in jobs.items()} == dict.fromkeys(ids, JobStatus.DEAD)
    for name, job in jobs.items():
        assert job.attempts == 1, name  # DEAD at once, never retried
        assert job.last_error and "\x00" not in job.last_error, name
    assert "NUL" in jobs["result-nul"].last_error and "surrogate" in jobs["result-surrogate"].last_error
    assert "nested more than" in jobs["result-deep"].last_error
    assert "MAX_RESULT_BYTES" in jobs["result-huge"].last_error
    assert "bad\\x00byte" in jobs["error-nul"].last_error
    assert "HostileError" in jobs["error-unprintable"].last_error
    assert "must be a JSON object, not list" in jobs["forged-array"].last_error
    assert "must be a JSON object, not int" in jobs["forged-scalar"].last_error
    assert "missing a required argument: 'b'" in jobs["forged-misfit"].last_error
    assert "unexpected keyword argument 'c'" in jobs["forged-extra"].last_error


def test_hostile_outcomes_go_dead_and_the_lane_serves_the_rest(caplog):
    good = Job.objects.enqueue_many(NewJob("test.echo", {"n": i}) for i in range(40))
    hostile = enqueue_hostile()
    worker = Worker({"default": 3}, burst=True)
    with caplog.at_level("INFO", logger="django_jobq"):
        worker.run()
    assert worker.processed == len(good) + len(hostile)
    assert Job.objects.filter(id__in=good, status=JobStatus.DONE).count() == len(good)
    assert_dead_with_clear_errors(hostile)
    # what the worker logs of them encodes as UTF-8 (a lone surrogate in a log line breaks a
    # UTF-8 log file or collector): escaped, as in the stored error
    dead_lines = [r.getMessage() for r in caplog.records if "is DEAD after attempt" in r.getMessage()]
    assert len(dead_lines) >= len(hostile)
    for line in dead_lines:
        line.encode("utf-8")
    assert any("lone \\ud800 surrogate" in line for line in dead_lines)


def test_a_raising_receiver_never_costs_a_job_or_the_worker():
    ids = Job.objects.enqueue_many(NewJob("test.echo", {"explode_receiver": True, "n": i}) for i in range(30))

    def raise_always(**kwargs):
        raise RuntimeError("receiver bug")

    for sig in (signals.job_succeeded, signals.job_dead, signals.job_retried):
        sig.connect(raise_always)
    try:
        worker = Worker({"default": 2}, burst=True)
        worker.run()
    finally:
        for sig in (signals.job_succeeded, signals.job_dead, signals.job_retried):
            sig.disconnect(raise_always)
    assert worker.processed == 30
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 30
    assert not Job.objects.filter(status=JobStatus.RUNNING).exists()


def test_a_batch_the_database_refuses_is_written_one_by_one(monkeypatch):
    """Even a value that slipped past every check must not wedge the lane: the refused batch is
    written job by job, the bad one goes DEAD, and it is never retried as if the database were down."""
    real = runner_module.result_json

    def leaky(value):
        return '{"t":"\\u0000"}' if value == {"poison": True} else real(value)

    monkeypatch.setattr(runner_module, "result_json", leaky)
    good = Job.objects.enqueue_many(NewJob("test.echo", {"n": i}) for i in range(20))
    poison = Job.objects.enqueue("test.echo", {"poison": True})
    worker = Worker({"default": 4}, burst=True)
    worker.run()
    assert Job.objects.filter(id__in=good, status=JobStatus.DONE).count() == 20
    job = Job.objects.get(id=poison)
    assert job.status == JobStatus.DEAD and "could not be stored" in job.last_error


def test_two_worker_processes_drain_good_and_hostile_jobs_and_stay_alive():
    good = Job.objects.enqueue_many(NewJob("test.echo", {"n": i}) for i in range(500))
    hostile = enqueue_hostile()
    hostile["receiver"] = Job.objects.enqueue("test.echo", {"explode_receiver": True})
    workers = [start_worker("--concurrency", "4") for _ in range(2)]
    try:
        # both running (their stop handlers installed) before the jobs can all be gone
        wait_until(lambda: WorkerRecord.objects.filter(stopped_at=None).count() == 2, message="two workers")
        wait_until(
            lambda: not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING]).exists(),
            timeout=120, interval=0.2, message="every job finished",
        )  # fmt: skip
        assert all(w.poll() is None for w in workers)  # no job stopped a worker
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        codes = [w.wait(60) for w in workers]
    assert codes == [0, 0]
    receiver_job = hostile.pop("receiver")
    assert Job.objects.filter(id__in=[*good, receiver_job], status=JobStatus.DONE).count() == 501
    assert_dead_with_clear_errors(hostile)
