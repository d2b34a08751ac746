"""@task(max_running=N) and max_running_per_key with enqueue(concurrency_key=...): never more job bodies
running at once than the cap across worker processes (max_running: in seats, as queue caps, with jobs
claimed ahead RUNNING beside them; per key: RUNNING rows, counted by the claim); jobs over the cap wait
without using up an attempt."""

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_jobq import InvalidJob
from django_jobq.exceptions import ConfigurationError
from django_jobq.managers import NewJob
from django_jobq.managers.capping import CapManager
from django_jobq.managers.claiming import ClaimManager
from django_jobq.models import Job, JobStatus
from django_jobq.tasks import task
from tests.conftest import start_worker, wait_until
from tests.integration.test_queue_caps import stop_all
from tests.occupancy import peak

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


class GroupSampler(threading.Thread):
    """RUNNING jobs per (task, concurrency_key), read every 10 ms: the largest figure of each group."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak: dict[tuple[str, str | None], int] = {}
        self.per_task: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT task, concurrency_key, count(*) FROM jobq_job WHERE status = 1 "
                        "GROUP BY task, concurrency_key"
                    )
                    rows = cursor.fetchall()
                totals: dict[str, int] = {}
                for task_name, key, n in rows:
                    self.peak[(task_name, key)] = max(self.peak.get((task_name, key), 0), n)
                    totals[task_name] = totals.get(task_name, 0) + n
                for task_name, n in totals.items():
                    self.per_task[task_name] = max(self.per_task.get(task_name, 0), n)
                time.sleep(0.01)
        finally:
            connections.close_all()


@pytest.mark.p0
@pytest.mark.slow
def test_task_and_per_key_caps_hold_across_four_worker_processes(tmp_path):
    occupancy = str(tmp_path / "occupancy.log")
    Job.objects.enqueue_many(NewJob("test.capped_occupy", {"log": occupancy}) for _ in range(60))
    Job.objects.enqueue_many(
        NewJob("test.capped_per_key", concurrency_key=f"customer:{i % 3}") for i in range(60)
    )
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(100))
    sampler = GroupSampler()
    sampler.start()
    logs = [tmp_path / f"worker{i}.log" for i in range(4)]
    workers = []
    for log in logs:
        with log.open("w") as stderr:
            workers.append(start_worker("--queues", "*:8", stderr=stderr))
    try:
        wait_until(lambda: Job.objects.filter(status=JobStatus.DONE).count() == 220, timeout=120,
                   message="every job to finish")  # fmt: skip
    except AssertionError as exc:  # say where the jobs stand, for a run that stalls
        now, rows = timezone.now(), Job.objects.exclude(status=JobStatus.DONE)
        left = Counter(  # a lease expired: the worker no longer renews it (no reaper runs here)
            (task, status, fence, worker, lease is not None and lease < now)
            for task, status, fence, worker, lease in rows.values_list(
                "task", "status", "fence", "worker_id", "lease_until"
            )
        )
        said = "".join(f"\n--- worker {i} ---\n{log.read_text()[-3000:]}" for i, log in enumerate(logs))
        raise AssertionError(
            f"{exc}; not DONE (task, status, fence, worker, lease expired): {dict(left)}{said}"
        ) from exc
    finally:
        sampler.stop.set()
        sampler.join()
        stop_all(workers)
    assert peak(Path(occupancy)) == (2, 60)  # the cap's bodies at once, and every body ran once
    for i in range(3):
        assert sampler.peak.get(("test.capped_per_key", f"customer:{i}")) == 1
    assert sampler.per_task.get("test.capped_per_key", 0) <= 3
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}  # waiting spent no attempt


def test_bad_caps_and_keys_are_refused():
    for bad in (0, -1, True, "2", 10**7):
        with pytest.raises(ConfigurationError):
            task(name=f"test.bad_cap_{bad!s}", max_running=bad)(lambda: None)
        with pytest.raises(ConfigurationError):
            task(name=f"test.bad_key_cap_{bad!s}", max_running_per_key=bad)(lambda: None)
    for key in ("", "k\x00", "\ud800", 5):
        with pytest.raises(InvalidJob, match="concurrency_key"):
            Job.objects.enqueue("test.capped_per_key", concurrency_key=key)
    assert not Job.objects.exists()


# The runs of test.capped_timed in this process (the in-process worker's): (start, end), monotonic.
TIMED_RUNS: list[tuple[float, float]] = []


@task(name="test.capped_timed", max_running=2)
def capped_timed() -> None:
    start = time.monotonic()
    time.sleep(0.02)
    TIMED_RUNS.append((start, time.monotonic()))


def most_at_once(runs: list[tuple[float, float]]) -> int:
    """The most runs inside their function at one moment (an end before a start at the same time)."""
    now = most = 0
    for _, step in sorted([(s, 1) for s, _ in runs] + [(e, -1) for _, e in runs]):
        now += step
        most = max(most, now)
    return most


@pytest.fixture
def claims(monkeypatch):
    """The jobs each of the worker's claims took (a cycle's complete_and_claim with room to claim)."""
    taken: list[int] = []
    claim = ClaimManager.complete_and_claim

    def counted(self, worker_id, done, limit, *args, **kwargs):
        completed, jobs = claim(self, worker_id, done, limit, *args, **kwargs)
        if limit:
            taken.append(len(jobs))
        return completed, jobs

    monkeypatch.setattr(ClaimManager, "complete_and_claim", counted)
    return taken


@pytest.fixture
def statements(monkeypatch):
    """The claim statements run (the task caps' may claim again in the same transaction)."""
    ran: list[int] = []
    run = ClaimManager._run_complete_and_claim

    def counted(self, statement, params):
        ran.append(params["limit"])
        return run(self, statement, params)

    monkeypatch.setattr(ClaimManager, "_run_complete_and_claim", counted)
    return ran


def test_a_burst_worker_drains_a_capped_task_claiming_each_job_once(worker_thread, claims):
    """Issue 22 #4: @task(max_running=2), 40 jobs of 20 ms, one worker of 8 slots with --burst. The
    claim takes no job it has no seat for (so none is given back to wait out POLL_INTERVAL and claimed
    again: each job is claimed once), the worker waits for its seats while its own capped jobs run,
    and exits with none left. It claims ahead of its seats, so RUNNING rows may outnumber the cap: the
    bodies may not."""
    TIMED_RUNS.clear()
    ids = Job.objects.enqueue_many(NewJob("test.capped_timed") for _ in range(40))
    worker = worker_thread({"default": 8}, burst=True)
    wait_until(worker.finished.is_set, timeout=120, message="the burst worker to exit")
    assert not Job.objects.filter(status=JobStatus.PENDING).exists()
    rows = Job.objects.filter(id__in=ids)
    assert set(rows.values_list("status", "attempts", "fence")) == {(JobStatus.DONE, 1, 1)}  # claimed once
    assert sum(claims) == 40
    assert most_at_once(TIMED_RUNS) == 2 and len(TIMED_RUNS) == 40


def test_a_claim_takes_the_jobs_behind_those_its_caps_hold_back(statements):
    """The jobs of a task (a key) at its cap are left PENDING, untouched, and the claim reaches the
    jobs behind them: at once when the task (the key) is full, with one more statement in the same
    transaction when the claim itself fills it."""
    capped = Job.objects.enqueue_many(NewJob("test.capped") for _ in range(10))
    Job.objects.enqueue_many(NewJob("test.noop") for _ in range(20))
    keyed = Job.objects.enqueue_many(
        NewJob("test.capped_per_key", queue="keys", concurrency_key=key) for key in "aaabbbccc"
    )
    Job.objects.enqueue_many(NewJob("test.noop", queue="keys") for _ in range(20))

    _, first = Job.objects.complete_and_claim("w1", [], 8, "default")
    assert Counter(job.task for job in first) == {"test.capped": 2, "test.noop": 6}
    _, again = Job.objects.complete_and_claim("w2", [], 8, "default")
    assert Counter(job.task for job in again) == {"test.noop": 8}  # the capped task is at its cap
    _, keys = Job.objects.complete_and_claim("w1", [], 8, "keys")
    taken = Counter((job.task, job.concurrency_key) for job in keys)
    assert taken == {("test.capped_per_key", k): 1 for k in "abc"} | {("test.noop", None): 5}
    _, keys_again = Job.objects.complete_and_claim("w2", [], 8, "keys")
    assert Counter(job.task for job in keys_again) == {"test.noop": 8}
    assert statements == [8, 6, 8, 8, 5, 8]  # claims again after filling a task (keys), for the rest
    untouched = Job.objects.filter(id__in=capped + keyed, status=JobStatus.PENDING, fence=0)
    assert untouched.count() == 8 + 6


def test_a_claim_told_not_to_look_past_takes_only_the_front(statements):
    """look_past=False (a worker whose last look found nothing, within LOOK_PAST_SECONDS): the claim
    stops at the jobs its cap holds back, in one statement, and the jobs behind stay PENDING."""
    Job.objects.enqueue_many(NewJob("test.capped") for _ in range(10))
    behind = Job.objects.enqueue_many(NewJob("test.noop") for _ in range(5))
    _, front = Job.objects.complete_and_claim("w1", [], 8, "default", look_past=False)
    assert Counter(job.task for job in front) == {"test.capped": 2}
    assert statements == [8]
    assert Job.objects.filter(id__in=behind, status=JobStatus.PENDING).count() == 5
    _, rest = Job.objects.complete_and_claim("w1", [], 8, "default")
    assert sorted(job.id for job in rest) == behind  # the next look reaches them


def test_a_worker_reaches_jobs_queued_behind_a_capped_backlog_while_it_drains(settings, worker_thread):
    """A worker draining a deep backlog of a task at its cap (2 of 4 slots) looks past the held-back
    jobs at most every LOOK_PAST_SECONDS: jobs enqueued behind the backlog afterwards run while most of
    it still waits (200 x 20 ms / 2 = at least 2 s of it; without the look they would run last). No wake-up and no poll: every
    cycle writes a capped run, so its claim sees room for the task, and only the look past reaches them."""
    settings.JOBQ = {**settings.JOBQ, "NOTIFY": False, "POLL_INTERVAL": 60}
    TIMED_RUNS.clear()
    capped = Job.objects.enqueue_many(NewJob("test.capped_timed") for _ in range(200))
    worker_thread({"default": 4})
    wait_until(lambda: len(TIMED_RUNS) >= 4, message="the capped backlog to start draining")
    behind = Job.objects.enqueue_many(NewJob("test.noop") for _ in range(5))
    wait_until(
        lambda: Job.objects.filter(id__in=behind, status=JobStatus.DONE).count() == 5,
        message="the jobs behind the backlog",
    )
    assert Job.objects.filter(id__in=capped, status=JobStatus.PENDING).count() > 100
    wait_until(lambda: len(TIMED_RUNS) == 200, timeout=120, message="the capped backlog")
    assert most_at_once(TIMED_RUNS) <= 2


# test.capped_hang's function: entered, then held until the test lets it go.
HANG_ENTERED = threading.Event()
HANG_RELEASE = threading.Event()


@task(name="test.capped_hang", max_running=1, timeout=0.2, max_attempts=1)
def capped_hang() -> None:
    HANG_ENTERED.set()
    HANG_RELEASE.wait(60)


@pytest.mark.p1
def test_a_sync_job_past_its_timeout_holds_its_cap_room_while_its_function_runs(worker_thread):
    """Caps count RUNNING rows, so a run must stay RUNNING until it ends: a sync function cannot be
    interrupted, and were its job failed at its timeout while the function kept running, the task's
    one cap slot would be free and another claim would start a second run beside the first. A real
    worker (one slot) runs the first job; once its watchdog has timed the run out (the slot is stuck
    in it), a claim from another worker finds no room while the function still runs."""
    HANG_ENTERED.clear()
    HANG_RELEASE.clear()
    first, second = (Job.objects.enqueue("test.capped_hang") for _ in range(2))
    worker = worker_thread({"default": 1})
    try:
        assert HANG_ENTERED.wait(30), "the first job's function to start"
        wait_until(lambda: worker.lanes["default"].stuck() == 1, timeout=30, message="the watchdog's timeout")
        _, taken = Job.objects.complete_and_claim("another-worker", [], 1, "default")
        assert [job.id for job in taken] == []  # the cap's room is still the hung function's
    finally:
        HANG_RELEASE.set()
    wait_until(lambda: Job.objects.get(id=second).status == JobStatus.DONE, message="the second job, after")
    job = Job.objects.get(id=first)
    assert job.status == JobStatus.DEAD and "JobTimeout" in job.last_error


def test_a_claim_that_raced_another_for_the_cap_gives_its_jobs_back_in_place(monkeypatch):
    """Two claims read the same free room at once: the one that settles second (under the task's
    lock, after the first committed) gives its jobs back, PENDING in their place with their attempt
    returned, in its own transaction: nobody sees more than the cap RUNNING."""
    ids = Job.objects.enqueue_many(NewJob("test.capped") for _ in range(4))
    run_at = dict(Job.objects.filter(id__in=ids).values_list("id", "run_at"))
    settle = CapManager._trim_to_task_caps
    other: list = []

    def racing(self, worker_id, jobs, counted):
        if worker_id == "w1":  # between w1's claim and its settling, w2 claims and commits

            def claim() -> None:
                try:
                    other.extend(Job.objects.complete_and_claim("w2", [], 8, "default")[1])
                finally:
                    connections.close_all()

            thread = threading.Thread(target=claim)
            thread.start()
            thread.join(30)
        return settle(self, worker_id, jobs, counted)

    monkeypatch.setattr(CapManager, "_trim_to_task_caps", racing)
    # w1 asks for 2: its walk locks those only (the rows a walk cuts stay locked until it commits)
    _, mine = Job.objects.complete_and_claim("w1", [], 2, "default")
    assert mine == [] and len(other) == 2
    back = list(Job.objects.filter(id__in=ids, status=JobStatus.PENDING))
    assert len(back) == 2 and {job.id for job in back}.isdisjoint(job.id for job in other)
    assert all(job.run_at == run_at[job.id] and job.attempts == 0 for job in back)
