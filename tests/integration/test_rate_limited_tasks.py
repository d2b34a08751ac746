"""@task(rate_limit=...) and JOBQ["QUEUES"][q]["RATE_LIMIT"]: across every worker a job starts only
with a permit; one without waits in PENDING, due at the next expected permit, using up no attempt."""

import datetime as dt
import json
import signal
import subprocess

import pytest

from django_jobq.exceptions import ConfigurationError
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.tasks import task
from tests.conftest import start_worker, wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def most_in_any_second(times: list[dt.datetime]) -> int:
    times = sorted(times)
    most, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] >= dt.timedelta(seconds=1):
            start += 1
        most = max(most, end - start + 1)
    return most


def drain(n_jobs: int, lanes: str, env: dict[str, str] | None = None, **job) -> list[dt.datetime]:
    Job.objects.enqueue_many(NewJob(**job) for _ in range(n_jobs))
    workers = [start_worker("--queues", lanes, env=env, stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        wait_until(lambda: Execution.objects.count() >= 20, timeout=60, message="20 starts")
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
    return list(Execution.objects.values_list("ran_at", flat=True))


@pytest.mark.p0
@pytest.mark.slow
def test_a_task_rate_limit_holds_across_two_workers_of_eight_slots():
    starts = drain(60, "*:8", task="test.rate_limited")
    assert most_in_any_second(starts) <= 5 + 5  # the rate, plus the burst of a full bucket
    assert Execution.objects.values("job_id").distinct().count() == len(starts)  # each job started once
    done = Job.objects.filter(status=JobStatus.DONE)
    assert done.count() == len(starts) and set(done.values_list("attempts", flat=True)) == {1}
    assert Job.objects.filter(status=JobStatus.PENDING, attempts=0).count() == 60 - len(starts)


@pytest.mark.slow
def test_a_queue_rate_limit_holds_across_workers():
    env = {"JOBQ_QUEUES": json.dumps({"slow": {"RATE_LIMIT": "4/s"}})}
    starts = drain(40, "slow:8", env=env, task="test.record", queue="slow")
    assert most_in_any_second(starts) <= 4 + 4
    assert set(Job.objects.filter(status=JobStatus.DONE).values_list("attempts", flat=True)) == {1}


@pytest.mark.parametrize("rate", ["5", "5/x", "0/s", "-1/s", "5/s/s", 5, "5/0s"])
def test_bad_rate_limits_are_refused(settings, rate):
    with pytest.raises(ConfigurationError, match="rate"):
        task(name="test.bad_rate", rate_limit=rate)(lambda: None)
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"q": {"RATE_LIMIT": rate}}}
    from django_jobq.conf import jobq_settings

    with pytest.raises(ConfigurationError, match="RATE_LIMIT"):
        jobq_settings()


def test_the_reaper_prunes_rate_limit_rows_at_rest(python_clock):
    import time_machine

    from django_jobq.ratelimit import TokenBucket
    from django_jobq.reaper import Reaper

    with time_machine.travel(dt.datetime(2026, 7, 1, tzinfo=dt.UTC), tick=False) as clock:
        bucket = TokenBucket("reaper-test", 1, 1, 1)
        assert bucket.acquire()
        assert Reaper().run_once().pruned_rates == 0  # not full again yet: its state matters
        clock.shift(2)  # full again, and kept until its rest step ends (a minute at most)
        assert Reaper().run_once().pruned_rates == 0
        clock.shift(60)
        assert Reaper().run_once().pruned_rates == 1
        assert bucket.acquire()  # a pruned key starts full, as it would have been
