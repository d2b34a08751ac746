"""Dedupe keys: windows after DONE and DEAD, the modes on a duplicate, races decided by the database."""

import datetime as dt
import math
import subprocess
import threading

import pytest
import time_machine
from django.db import connection, connections
from django.utils import timezone

from django_jobq import InvalidJob
from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus
from django_jobq.sql import POSTGRES as postgres
from tests.conftest import explain, plan_nodes, run_module

pytestmark = [pytest.mark.contract, pytest.mark.django_db(transaction=True)]

T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def finish(key, *, dead=False, **options) -> int:
    """Enqueue a job with ``key`` and take it to DONE (or DEAD) at the clock's current time."""
    job_id = Job.objects.enqueue("test.noop", dedupe_key=key, max_attempts=1, **options)
    assert job_id
    job = Job.objects.claim("w1")
    assert job is not None and job.id == job_id
    if dead:
        assert Job.objects.fail(job_id, "w1", "boom", fence=job.fence) == JobStatus.DEAD
    else:
        assert Job.objects.complete(job_id, "w1", fence=job.fence)
    return job_id


@pytest.fixture
def clock(python_clock):
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def at(clock, seconds: float) -> None:
    clock.move_to(T0 + dt.timedelta(seconds=seconds))


@pytest.mark.p0
@pytest.mark.parametrize(("dead", "window"), [(False, 86_400), (True, 300)])
def test_default_windows_keep_the_key_taken_then_free_it_at_the_edge(clock, dead, window):
    first = finish("k", dead=dead)
    at(clock, window - 0.001)
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None
    at(clock, window)  # exactly at the edge: free
    second = Job.objects.enqueue("test.noop", dedupe_key="k")
    assert second and second != first
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None  # the new job holds it now
    assert Job.objects.get(id=first).key_released


@pytest.mark.parametrize(
    ("setting", "value", "dead", "free_at"),
    [("DEDUPE_DONE_SECONDS", 30, False, 30), ("DEDUPE_DEAD_SECONDS", 7, True, 7)],
)
def test_window_settings(clock, settings, setting, value, dead, free_at):
    settings.JOBQ = {**settings.JOBQ, setting: value}
    finish("k", dead=dead)
    at(clock, free_at - 1)
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None
    at(clock, free_at)
    assert Job.objects.enqueue("test.noop", dedupe_key="k")


def test_per_task_windows_seconds_and_timedelta(clock):
    for dead, window in (
        (False, 60),
        (True, 10),
    ):  # test.windowed: dedupe_done=60, dedupe_dead=timedelta(10s)
        key = f"task-{dead}"
        Job.objects.enqueue("test.windowed", dedupe_key=key, max_attempts=1)
        job = Job.objects.claim("w1")
        if dead:
            Job.objects.fail(job.id, "w1", "boom", fence=job.fence)
        else:
            Job.objects.complete(job.id, "w1", fence=job.fence)
        at(clock, window - 1)
        assert Job.objects.enqueue("test.windowed", dedupe_key=key) is None
        at(clock, window)
        assert Job.objects.enqueue("test.windowed", dedupe_key=key)
        clock.move_to(T0)


def test_per_call_windows_override_the_task_and_go_through_using(clock):
    from tests.testapp.tasks import windowed

    windowed.using(dedupe_key="k", dedupe_done=dt.timedelta(seconds=5)).enqueue()
    job = Job.objects.claim("w1")
    Job.objects.complete(job.id, "w1", fence=job.fence)
    at(clock, 4)
    assert windowed.using(dedupe_key="k").enqueue() is None
    at(clock, 5)
    assert windowed.using(dedupe_key="k").enqueue()


def test_a_zero_window_frees_the_key_at_once(clock):
    first = finish("k", dedupe_done=0)
    second = Job.objects.enqueue("test.noop", dedupe_key="k")
    assert second and second != first


def test_the_window_belongs_to_the_job_holding_the_key(clock):
    finish("k", dedupe_done=100)
    at(clock, 50)
    assert Job.objects.enqueue("test.noop", dedupe_key="k", dedupe_done=0) is None  # its own window is 0
    at(clock, 100)
    assert Job.objects.enqueue("test.noop", dedupe_key="k", dedupe_done=0)


def test_active_jobs_hold_their_key_whatever_the_window(clock):
    Job.objects.enqueue("test.noop", dedupe_key="k", dedupe_done=0)
    at(clock, 10**6)
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None
    Job.objects.claim("w1")
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None


def test_a_retry_waiting_in_pending_keeps_the_key(clock):
    job_id = Job.objects.enqueue("test.noop", dedupe_key="k", max_attempts=3, dedupe_dead=0)
    job = Job.objects.claim("w1")
    assert Job.objects.fail(job_id, "w1", "transient", fence=job.fence) == JobStatus.PENDING
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None


# -- races -----------------------------------------------------------------------------------------------
def race(threads: int, call) -> list:
    barrier = threading.Barrier(threads)
    answers: list = []
    lock = threading.Lock()

    def run():
        try:
            barrier.wait()
            answer = call()
            with lock:
                answers.append(answer)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert len(answers) == threads
    return answers


@pytest.mark.p0
@pytest.mark.parametrize("dead", [False, True])
@pytest.mark.parametrize(("offset", "expected"), [(-0.001, 0), (0, 1), (3600, 1)])
def test_eight_threads_around_the_window_edge_make_one_job_per_window(clock, dead, offset, expected):
    finish("k", dead=dead, dedupe_done=60, dedupe_dead=60)
    at(clock, 60 + offset)
    answers = race(8, lambda: Job.objects.enqueue("test.noop", dedupe_key="k"))
    assert sum(a is not None for a in answers) == expected
    assert Job.objects.filter(dedupe_key="k", key_released=False).count() == 1
    assert Job.objects.filter(dedupe_key="k").count() == 1 + expected


def processes_enqueue(key: str, n: int = 4) -> list:
    import json

    procs = [
        run_module(
            "tests.procs.enqueuer", "enqueue", "test.noop", key, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in range(n)
    ]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    answers = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        answers.append(json.loads(out))
    return answers


@pytest.mark.p0
@pytest.mark.parametrize("dead", [False, True])
def test_four_processes_inside_then_after_the_window(dead):
    """On the database clock: inside the window nobody gets the key; once it is over, exactly one."""
    first = finish("k", dead=dead, dedupe_done=3600, dedupe_dead=3600)
    assert processes_enqueue("k") == [None] * 4
    # the job finished an hour ago: its window is over now
    Job.objects.filter(id=first).update(finished_at=timezone.now() - dt.timedelta(seconds=3601))
    answers = processes_enqueue("k")
    assert sum(a is not None for a in answers) == 1
    assert Job.objects.filter(dedupe_key="k").count() == 2


# -- pruning and requeue -----------------------------------------------------------------------------------
def test_pruning_never_reopens_a_key_inside_its_window(clock):
    kept = finish("k", dedupe_done=3600)
    plain = Job.objects.enqueue("test.noop", max_attempts=1)
    Job.objects.complete(Job.objects.claim("w1").id, "w1")
    at(clock, 600)
    assert Job.objects.prune(JobStatus.DONE, older_than=60, batch=100) == 1  # only the keyless job
    assert not Job.objects.filter(id=plain).exists()
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None
    at(clock, 3600)
    assert Job.objects.prune(JobStatus.DONE, older_than=60, batch=100) == 1  # the window is over
    assert not Job.objects.filter(id=kept).exists()
    assert Job.objects.enqueue("test.noop", dedupe_key="k")


def test_requeue_of_a_dead_job_honours_its_key(clock):
    dead = finish("k", dead=True, dedupe_dead=0)
    newer = Job.objects.enqueue("test.noop", dedupe_key="k", dedupe_done=100)  # takes the key over
    assert newer
    assert Job.objects.requeue(dead) is False  # the key is held by an active job
    Job.objects.complete(Job.objects.claim("w1").id, "w1")
    at(clock, 50)
    assert Job.objects.requeue(dead) is False  # ... and then by a DONE one inside its window
    at(clock, 100)
    assert Job.objects.requeue(dead) is True  # the window is over: the key comes back to it
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None
    job = Job.objects.get(id=dead)
    assert job.status == JobStatus.PENDING and not job.key_released


def test_requeue_of_the_dead_holder_itself_inside_its_window(clock):
    dead = finish("k", dead=True)
    assert Job.objects.requeue(dead) is True
    assert Job.objects.enqueue("test.noop", dedupe_key="k") is None


# -- modes ------------------------------------------------------------------------------------------------
@pytest.mark.p0
def test_replace_burst_ends_as_one_pending_job_with_the_last_payload_and_run_at(clock):
    ids = set()
    for i in range(50):
        at(clock, i)
        ids.add(Job.objects.enqueue("test.echo", {"i": i}, dedupe_key="k", delay=30, on_duplicate="replace"))
    assert len(ids) == 1
    job = Job.objects.get(dedupe_key="k")
    assert job.status == JobStatus.PENDING and job.payload == {"i": 49}
    assert job.run_at == T0 + dt.timedelta(seconds=49 + 30)


@pytest.mark.p0
def test_debounce_pushes_the_run_back_so_a_burst_runs_once_after_the_last_call(clock):
    for i in range(50):
        at(clock, i * 0.5)
        job_id = Job.objects.enqueue("test.echo", {"i": i}, dedupe_key="k", delay=10, on_duplicate="debounce")
    job = Job.objects.get(id=job_id)
    assert Job.objects.filter(dedupe_key="k").count() == 1
    assert job.payload == {"i": 49} and job.run_at == T0 + dt.timedelta(seconds=24.5 + 10)
    at(clock, 24.5 + 9.9)
    assert Job.objects.claim("w1") is None  # the quiet period is not over
    at(clock, 24.5 + 10)
    assert Job.objects.claim("w1").payload == {"i": 49}


def test_replace_never_modifies_a_running_or_finished_holder(clock):
    first = Job.objects.enqueue("test.echo", {"v": 1}, dedupe_key="k")
    job = Job.objects.claim("w1")
    assert Job.objects.enqueue("test.echo", {"v": 2}, dedupe_key="k", delay=5, on_duplicate="replace") is None
    running = Job.objects.get(id=first)
    assert running.payload == {"v": 1} and running.fence == job.fence and running.status == JobStatus.RUNNING
    Job.objects.complete(first, "w1", fence=job.fence)
    assert Job.objects.enqueue("test.echo", {"v": 3}, dedupe_key="k", delay=5, on_duplicate="replace") is None
    assert Job.objects.get(id=first).payload == {"v": 1}


def debounce(payload: dict) -> int | None:
    return Job.objects.enqueue("test.echo", payload, dedupe_key="k", delay=10, on_duplicate="debounce")


@pytest.mark.p0
def test_a_burst_while_the_holder_runs_gets_one_successor_that_runs_after_its_last_call(clock):
    first = debounce({"v": 1})
    at(clock, 10)
    job = Job.objects.claim("w1")
    assert job.id == first
    at(clock, 11)
    successor = debounce({"v": 2})
    at(clock, 12)
    assert debounce({"v": 3}) == successor  # later calls of the burst replace the successor's payload
    assert successor not in (None, first)
    running = Job.objects.get(id=first)  # the holder is never touched, only its key passes on
    assert (running.status, running.payload, running.fence) == (JobStatus.RUNNING, {"v": 1}, job.fence)
    assert running.key_released
    assert Job.objects.enqueue("test.echo", {"v": 4}, dedupe_key="k") is None  # the successor holds it
    assert Job.objects.complete(first, "w1", fence=job.fence)
    at(clock, 12 + 9.9)
    assert Job.objects.claim("w1") is None  # its quiet period is not over
    at(clock, 12 + 10)
    assert Job.objects.claim("w1").payload == {"v": 3}
    assert Job.objects.filter(dedupe_key="k").count() == 2


@pytest.mark.p0
@pytest.mark.parametrize("dead", [False, True])
def test_every_later_burst_inside_the_window_runs_once_after_its_last_call(clock, dead):
    """A finished holder keeps its key for skip and replace (dedupe_done, 24 h), not from a debounce:
    each burst runs, with its last payload."""
    ran = []
    for burst in range(3):
        start = burst * 100  # inside both default windows (24 h after DONE, 5 min after DEAD)
        for i in range(5):
            at(clock, start + i)
            debounce({"burst": burst, "i": i})
        at(clock, start + 4 + 10)
        job = Job.objects.claim("w1")
        assert job is not None and Job.objects.claim("w1") is None
        ran.append(job.payload)
        if dead:
            Job.objects.fail(job.id, "w1", "boom", permanent=True, fence=job.fence)
        else:
            Job.objects.complete(job.id, "w1", fence=job.fence)
        assert Job.objects.enqueue("test.echo", {}, dedupe_key="k") is None  # inside the window for skip
    assert ran == [{"burst": b, "i": 4} for b in range(3)]


def test_concurrent_debounces_while_the_holder_runs_make_one_successor(clock):
    first = debounce({"v": 0})
    at(clock, 10)
    assert Job.objects.claim("w1").id == first
    answers = race(8, lambda: debounce({"t": threading.get_ident()}))
    assert len(set(answers)) == 1 and None not in answers and first not in answers
    assert Job.objects.filter(dedupe_key="k", status=JobStatus.PENDING).count() == 1
    assert Job.objects.filter(dedupe_key="k", key_released=False).count() == 1


def test_replace_leaves_a_holder_of_another_task_alone(clock):
    first = Job.objects.enqueue("test.echo", {"v": 1}, dedupe_key="k")
    assert Job.objects.enqueue("test.noop", {}, dedupe_key="k", on_duplicate="replace") is None
    assert Job.objects.get(id=first).task == "test.echo"


def test_replace_concurrent_callers_leave_one_job_with_one_of_their_payloads(clock):
    answers = race(
        8,
        lambda: Job.objects.enqueue(
            "test.echo", {"t": threading.get_ident()}, dedupe_key="k", on_duplicate="replace"
        ),
    )
    assert len(set(answers)) == 1 and None not in answers
    assert Job.objects.filter(dedupe_key="k").count() == 1


def test_enqueue_many_honours_keys_first_in_batch_wins(clock):
    held = Job.objects.enqueue("test.echo", {"v": "held"}, dedupe_key="held")
    ids = Job.objects.enqueue_many([
        NewJob("test.echo", {"v": "a1"}, dedupe_key="a"),
        NewJob("test.echo", {"v": "b"}, dedupe_key="b"),
        NewJob("test.echo", {"v": "a2"}, dedupe_key="a"),
        NewJob("test.echo", {"v": "held2"}, dedupe_key="held"),
        NewJob("test.echo", {"v": "plain"}),
    ])  # fmt: skip
    assert len(ids) == 3 and held not in ids
    assert Job.objects.get(dedupe_key="a").payload == {"v": "a1"}
    assert Job.objects.get(dedupe_key="held").payload == {"v": "held"}
    replaced = Job.objects.enqueue_many(
        [
            NewJob("test.echo", {"v": "held3"}, dedupe_key="held"),
            NewJob("test.echo", {"v": "c"}, dedupe_key="c"),
        ],
        on_duplicate="replace",
    )
    assert held in replaced and len(replaced) == 2
    assert Job.objects.get(dedupe_key="held").payload == {"v": "held3"}


def test_enqueue_many_frees_keys_whose_window_is_over(clock):
    old = finish("k", dedupe_done=10)
    assert Job.objects.enqueue_many([NewJob("test.noop", dedupe_key="k")]) == []
    at(clock, 10)
    (new,) = Job.objects.enqueue_many([NewJob("test.noop", dedupe_key="k", dedupe_done=0)])
    assert new != old and Job.objects.get(id=old).key_released


def test_concurrent_keyed_batches_never_deadlock():
    keys = [f"k{i}" for i in range(200)]

    def batch():
        order = keys[:] if threading.get_ident() % 2 else keys[::-1]
        return Job.objects.enqueue_many([NewJob("test.noop", dedupe_key=k) for k in order])

    answers = race(6, batch)
    assert sum(len(ids) for ids in answers) == len(keys)


# -- bad input --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_duplicate": "overwrite", "dedupe_key": "k"}, "on_duplicate must be one of"),
        ({"on_duplicate": None, "dedupe_key": "k"}, "on_duplicate must be one of"),
        ({"on_duplicate": "replace"}, "needs a dedupe_key"),
        ({"on_duplicate": "debounce", "dedupe_key": "k"}, "needs a positive delay"),
        ({"dedupe_key": "k", "dedupe_done": -1}, "dedupe_done must be"),
        ({"dedupe_key": "k", "dedupe_done": math.nan}, "dedupe_done must be"),
        ({"dedupe_key": "k", "dedupe_dead": True}, "dedupe_dead must be"),
        ({"dedupe_key": "k", "dedupe_dead": 10**12}, "dedupe_dead must be"),
        ({"dedupe_key": "k", "dedupe_done": "1d"}, "dedupe_done must be"),
        ({"dedupe_key": "k\x00"}, "dedupe_key"),
        ({"dedupe_key": "\ud800"}, "dedupe_key"),
    ],
)
def test_bad_dedupe_options_are_refused_before_anything_is_written(options, message):
    with pytest.raises(InvalidJob, match=message):
        Job.objects.enqueue("test.noop", **options)
    assert not Job.objects.exists()


def test_bad_enqueue_many_modes_are_refused():
    for mode in ("debounce", "x", None):
        with pytest.raises(InvalidJob, match="on_duplicate"):
            Job.objects.enqueue_many([NewJob("test.noop", dedupe_key="k")], on_duplicate=mode)
    with pytest.raises(InvalidJob, match="job 1: dedupe_done"):
        Job.objects.enqueue_many([NewJob("test.noop"), NewJob("test.noop", dedupe_key="k", dedupe_done=-5)])
    assert not Job.objects.exists()


# -- plans ------------------------------------------------------------------------------------------------
@pytest.mark.p1
@pytest.mark.slow
@pytest.mark.postgresql("query plans")
def test_keyed_enqueue_and_the_window_check_stay_on_indexes_with_a_million_finished_rows():
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, finished_at, dedupe_key, dedupe_done)
               SELECT 'test.noop', 'default', '{}', 2, 100, now(), 1, 5, '[]', now(), now() - interval '1 hour',
                      'key-' || i, interval '1 day'
               FROM generate_series(1, 1000000) AS i"""
        )
        cursor.execute("ANALYZE jobq_job")
    params = {
        "task": "test.noop", "queue": "default", "payload": "{}", "priority": 100, "run_at": None, "delay": 0.0,
        "max_attempts": 5, "dedupe_key": "key-77", "dedupe_done": 60.0, "dedupe_dead": 60.0, "notify": False,
        "concurrency_key": None, "tags": None, "trace_context": None, "fairness_key": None,
        "channel": "jobq",
    }  # fmt: skip
    for statement in (postgres.ENQUEUE_KEYED, postgres.ENQUEUE_REPLACE, postgres.ENQUEUE_OR_GET):
        nodes = list(plan_nodes(explain(statement, params)))
        assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], statement
        assert {n.get("Index Name") for n in nodes} >= {"jobq_job_dedupe"}
    assert Job.objects.enqueue("test.noop", dedupe_key="key-77") is None  # inside its window of a day


def test_the_largest_accepted_dedupe_key_is_stored():
    key = "\U0001f600" * 500  # 2,000 bytes: the byte cap
    assert Job.objects.enqueue("test.noop", dedupe_key=key)
    assert Job.objects.enqueue("test.noop", dedupe_key=key) is None
