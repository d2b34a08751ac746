"""@task(rate_limit=...) and JOBQ["QUEUES"][q]["RATE_LIMIT"]: across every worker a job starts only
with a permit; one without waits in PENDING, due at the next expected permit, using up no attempt."""

import datetime as dt
import json
import signal
import subprocess
import threading
import time

import pytest

from django_jobq.exceptions import ConfigurationError
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.ratelimit import TokenBucket
from django_jobq.tasks import task
from django_jobq.worker import Worker
from tests.conftest import start_worker, wait_until
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# A task whose bucket does not refill within a test: what is left in it is what the worker spent.
task(name="test.five_an_hour", rate_limit="5/h")(lambda: None)
task(name="test.twenty_a_second", rate_limit="20/s")(lambda: None)
task(name="test.twice_an_hour_too", rate_limit="2/h")(lambda: None)


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
    assert max(Job.objects.values_list("fence", flat=True)) == 1  # no job claimed twice, by either worker


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


class _Claims:
    """Counts, from an in-process worker's signals, the jobs its lanes claimed and the starts a
    rate limit refused."""

    def __init__(self):
        from django_jobq import signals

        self.claimed = self.refused = 0
        self._signals = signals
        signals.jobs_claimed.connect(self._claimed, weak=False)
        signals.job_rate_limited.connect(self._refused, weak=False)

    def _claimed(self, sender=None, claimed=0, **kwargs):
        self.claimed += claimed

    def _refused(self, sender=None, **kwargs):
        self.refused += 1

    def close(self):
        self._signals.jobs_claimed.disconnect(self._claimed)
        self._signals.job_rate_limited.disconnect(self._refused)


@pytest.mark.p0
@pytest.mark.parametrize("lanes", [{"limited": 4}, {"*": 4}])
def test_a_rate_limited_queue_is_claimed_no_faster_than_its_permits(worker_thread, settings, lanes):
    """40 due jobs of a queue limited to 10/s: the worker claims each job once (a claim it could
    not start would be a refusal, a write and a claim more), and never holds one it has no permit
    for."""
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"limited": {"RATE_LIMIT": "10/s"}}}
    ids = Job.objects.enqueue_many(NewJob("test.record", queue="limited") for _ in range(40))
    claims = _Claims()
    try:
        worker_thread(lanes)
        wait_until(
            lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 40,
            timeout=60,
            message="40 jobs done",
        )
    finally:
        claims.close()
    assert Execution.objects.filter(job_id__in=ids).count() == 40
    print(
        "FIGURES",
        lanes,
        claims.claimed,
        claims.refused,
        sum(Job.objects.filter(id__in=ids).values_list("fence", flat=True)),
    )
    assert claims.refused == 0
    assert claims.claimed / 40 <= 1.1
    fences = Job.objects.filter(id__in=ids).values_list("fence", flat=True)
    assert sum(fences) / 40 <= 1.1  # each job's fence counts the claims it went through


def test_a_burst_worker_waits_for_the_permits_of_a_rate_limited_queue_and_drains_it(settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"limited": {"RATE_LIMIT": "10/s"}}}
    ids = Job.objects.enqueue_many(NewJob("test.record", queue="limited") for _ in range(15))
    Worker({"*": 4}, burst=True).run()  # exits once nothing more is due, not when the bucket is empty
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE, attempts=1, fence=1).count() == 15


def _bucket_left(queue: str) -> int:
    """The permits a queue's bucket holds now (taken, then given back)."""
    bucket = TokenBucket(f"jobq:queue:{queue}", 5, 3600, 5)
    taken, _ = bucket.take(5)
    if taken:
        bucket.give_back(taken)
    return taken


def test_permits_a_claim_found_no_job_for_go_back_to_the_bucket(worker_thread, settings):
    """A lane takes permits for its free slots before it claims: those the claim does not use, and
    those of jobs given back unstarted, return to the bucket; only started jobs spend one."""
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"limited": {"RATE_LIMIT": "5/h"}}}
    first = Job.objects.enqueue("test.record", queue="limited")
    worker_thread({"limited": 4})
    wait_until(lambda: Job.objects.get(id=first).status == JobStatus.DONE, message="the first job done")
    second = Job.objects.enqueue("test.record", queue="limited")  # its notification wakes the lane
    wait_until(lambda: Job.objects.get(id=second).status == JobStatus.DONE, message="the second job done")
    assert _bucket_left("limited") == 5 - 2


def test_jobs_given_back_unstarted_return_their_permits(settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"limited": {"RATE_LIMIT": "5/h"}}}
    Job.objects.enqueue_many(NewJob("test.noop", queue="limited") for _ in range(3))
    worker = Worker({"limited": 1})
    lane = worker.lanes["limited"]
    rations = worker._rations(lane, 3)  # a lane holding three: one for its slot, two claimed ahead
    assert rations == {"limited": 3} and _bucket_left("limited") == 2
    _, jobs = Job.objects.complete_and_claim(worker.worker_id, [], 3, "limited", rations=rations)
    worker._hand_out(lane, jobs, time.monotonic(), rations)
    worker.stopping.set()  # a stopping worker gives back what no slot started
    worker._give_back_unstarted(lane)
    assert Job.objects.filter(status=JobStatus.PENDING, attempts=0).count() == 3
    assert _bucket_left("limited") == 5
    worker._side_writer.close()


@pytest.mark.p0
@pytest.mark.parametrize("lanes", [{"default": 4}, {"*": 4}])
def test_a_rate_limited_task_is_claimed_no_faster_than_its_permits(worker_thread, lanes):
    """40 due jobs of a task limited to 20/s: after the first claim that finds the task (at most
    one job per slot, their permits taken in one go before they start), the worker takes the task's permits
    before it claims and claims no more of its jobs than it took, so each job is claimed about once
    (a claim it could not start would be a refusal, a write and a claim more)."""
    ids = Job.objects.enqueue_many(NewJob("test.twenty_a_second") for _ in range(40))
    claims = _Claims()
    try:
        worker_thread(lanes)
        wait_until(
            lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 40,
            timeout=60,
            message="40 jobs done",
        )
    finally:
        claims.close()
    assert claims.refused <= 4  # at most the first claim's jobs, once
    assert claims.claimed / 40 <= 1.1
    fences = Job.objects.filter(id__in=ids).values_list("fence", flat=True)
    assert sum(fences) / 40 <= 1.1  # each job's fence counts the claims it went through


def test_a_burst_worker_waits_for_the_permits_of_a_rate_limited_task_and_drains_it():
    ids = Job.objects.enqueue_many(NewJob("test.twenty_a_second") for _ in range(50))
    Worker({"*": 4}, burst=True).run()  # exits once nothing more is due, not when the bucket is empty
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE, attempts=1).count() == 50


def test_a_claim_takes_no_more_jobs_of_a_rate_limited_task_than_its_permits():
    """The claim keeps to the task's permits in all its statements (a "*" lane claims a rationed
    queue apart from the rest), and leaves the task's jobs out at 0, taking other jobs past them."""
    Job.objects.enqueue_many(NewJob("test.rate_limited") for _ in range(4))
    Job.objects.enqueue_many(NewJob("test.rate_limited", queue="limited") for _ in range(4))
    Job.objects.enqueue_many(NewJob("test.noop", priority=200) for _ in range(2))
    _, jobs = Job.objects.complete_and_claim(
        "w", [], 10, None, rations={"limited": 4}, task_rations={"test.rate_limited": 3}
    )
    assert sorted(job.task for job in jobs) == ["test.noop"] * 2 + ["test.rate_limited"] * 3
    _, jobs = Job.objects.complete_and_claim("w", [], 10, "default", task_rations={"test.rate_limited": 0})
    assert jobs == []  # the only due jobs left there are the task's
    assert Job.objects.filter(task="test.rate_limited", status=JobStatus.PENDING).count() == 5


@pytest.mark.p0
@pytest.mark.slow
def test_a_task_rate_limit_holds_across_two_workers_claiming_each_job_once():
    """25 jobs of a task limited to 5/s, drained by two worker processes: never more than the limit
    allows, and each job claimed about once by either worker."""
    ids = Job.objects.enqueue_many(NewJob("test.rate_limited") for _ in range(25))
    workers = [start_worker("--queues", "*:2", stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        wait_until(
            lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 25,
            timeout=90,
            message="25 jobs done",
        )
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
    starts = list(Execution.objects.values_list("ran_at", flat=True))
    assert len(starts) == 25 and most_in_any_second(starts) <= 5 + 5  # the rate, plus a full bucket
    # Claims per job: about one. A claim that found no permit and gave its job back (the fault this
    # guards against) costs a claim each time, ten a job and more; a job claimed ahead and given back
    # unstarted when the run before it passed 50 ms on a loaded machine costs one now and then.
    assert sum(Job.objects.filter(id__in=ids).values_list("fence", flat=True)) / 25 <= 1.5


def test_jobs_claimed_with_their_task_permits_spend_one_each(worker_thread):
    """Three jobs of a rate-limited task, one slot: the first claim takes one, and the lane its permit
    before handing it out; the next takes permits for the lane's room first (a slot and the jobs it may claim
    ahead), finds the other two, gives the rest back and stops rationing the task: the two start on
    the permits they were claimed with. Three jobs, three permits spent."""
    ids = Job.objects.enqueue_many(NewJob("test.five_an_hour") for _ in range(3))
    worker_thread({"default": 1})
    wait_until(lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 3, message="3 done")
    taken, _ = TokenBucket("jobq:task:test.five_an_hour", 5, 3600, 5).take(5)
    assert taken == 5 - 3


def test_a_slow_slot_never_loses_the_permit_of_a_job_of_the_first_claim(worker_thread, monkeypatch):
    """Five jobs of a task allowed twice an hour, taken by the first claim of five slots, four of them
    slow to start (a loaded machine): the lane takes the two permits for the claim before the jobs
    start. Were the slots to ask as they start, the lane's next claim, after the first job ended,
    could take the last permit meanwhile, find no job for it and hold it until it gave it back, so a
    slow slot's job was refused with the permit still to come back. Two jobs run, three wait."""
    plain_acquire, plain_give_back, calls = TokenBucket.acquire, TokenBucket.give_back, []

    def acquire(self, *args, **kwargs):
        calls.append(self.key)
        if len(calls) > 1:  # the first slot to ask runs its job at once; the others are slow to ask
            time.sleep(0.2)
        return plain_acquire(self, *args, **kwargs)

    def give_back(self, *args, **kwargs):
        time.sleep(0.6)  # a permit the lane took for nothing stays out of the bucket that long
        return plain_give_back(self, *args, **kwargs)

    monkeypatch.setattr(TokenBucket, "acquire", acquire)
    monkeypatch.setattr(TokenBucket, "give_back", give_back)
    ids = Job.objects.enqueue_many(NewJob("test.twice_an_hour_too") for _ in range(5))
    worker = worker_thread({"default": 5})
    wait_until(lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 2, message="2 done")
    wait_until(
        lambda: Job.objects.filter(id__in=ids, status=JobStatus.PENDING, attempts=0, fence=1).count() == 3,
        message="3 refused",
    )
    worker.stop()
    wait_until(worker.finished.is_set, message="the worker stopped")
    assert Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 2
    taken, _ = TokenBucket("jobq:task:test.twice_an_hour_too", 2, 3600, 2).take(2)
    assert taken == 0  # both permits spent on the two runs, none given back to be lost


def test_jobs_waiting_for_the_lanes_permit_statement_keep_their_leases(worker_thread, settings, monkeypatch):
    """The lane's take for a claim's jobs of a rate-limited task stalls past the lease (a database
    that stopped answering it): the jobs are the worker's already, so its heartbeat renews their
    leases meanwhile and the reaper never takes them back; once it answers they run, each once."""
    settings.JOBQ = {**settings.JOBQ, "LEASE_SECONDS": 4, "HEARTBEAT_SECONDS": 0.5}
    plain_take, stalled = TokenBucket.take, threading.Event()

    def take(self, *args, **kwargs):
        if not stalled.is_set():
            stalled.set()
            time.sleep(5)  # longer than the lease
        return plain_take(self, *args, **kwargs)

    monkeypatch.setattr(TokenBucket, "take", take)
    ids = Job.objects.enqueue_many(NewJob("test.five_an_hour") for _ in range(2))
    worker_thread({"default": 2})
    wait_until(stalled.is_set, message="the lane's take")
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline:  # the stall outlasts the lease: nothing is reaped
        assert Job.objects.reap() == []
        time.sleep(0.2)
    wait_until(lambda: Job.objects.filter(id__in=ids, status=JobStatus.DONE).count() == 2, message="2 done")
    assert set(Job.objects.filter(id__in=ids).values_list("attempts", "fence")) == {(1, 1)}
