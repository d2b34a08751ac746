"""Rate limits in PostgreSQL: parallel acquires (threads and processes) never pass more than the limit,
keys never share a count, buckets refill and windows slide on the database clock, the state outlives a
process, a permit outlives the caller's transaction, bad input is refused and idle keys are pruned.
When the database cannot answer: test_ratelimit_unavailable.py; waiting for a permit:
test_ratelimit_waiting.py.

Every limiter commits on its own connection, outside the test's transaction: each test uses fresh keys.
"""

import asyncio
import datetime as dt
import json
import subprocess
import threading
import uuid

import pytest
import time_machine
from django.db import connection, transaction
from django.utils import timezone

from django_jobq import InvalidJob, autocommit, ratelimit
from django_jobq.models import RateBucket, RateWindow
from django_jobq.ratelimit import SlidingWindow, TokenBucket, prune
from django_jobq.sql.postgres.ratelimit import REST_STEP_SECONDS
from tests.conftest import plan_nodes, run_module
from tests.ratelimits import SLOW, T0, fresh, limiter

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db]


def race(limiters: list, calls_each: int) -> list[list[bool]]:
    """``calls_each`` threads per limiter, all released at once by one barrier; the grants per limiter."""
    barrier = threading.Barrier(calls_each * len(limiters))
    granted: list[list[bool]] = [[] for _ in limiters]

    def call(i: int) -> None:
        barrier.wait()
        granted[i].append(limiters[i].acquire())

    threads = [
        threading.Thread(target=call, args=(i,)) for i in range(len(limiters)) for _ in range(calls_each)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return granted


def processes(kind: str, key: str, limit: int, calls: int, count: int = 4) -> list[dict]:
    procs = [
        run_module(
            "tests.procs.ratelimiter",
            kind,
            key,
            str(limit),
            str(calls),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in range(count)
    ]
    for proc in procs:  # every process has its threads waiting at the barrier ...
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:  # ... before any is let go
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [json.loads(proc.communicate(timeout=120)[0]) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    return outputs


# -- the limit holds under concurrency ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_100_threads_against_a_limit_of_10_get_exactly_10_permits(kind, monkeypatch):
    monkeypatch.setattr(autocommit, "POOL_SIZE", 16)  # 16 sessions racing for the key's row
    [granted] = race([limiter(kind, fresh(kind), 10)], 100)
    assert (len(granted), sum(granted)) == (100, 10)


@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_4_processes_of_25_threads_against_a_limit_of_10_get_exactly_10_permits(kind):
    outputs = processes(kind, fresh(kind), 10, 25)
    assert sum(out["calls"] for out in outputs) == 100
    assert sum(out["granted"] for out in outputs) == 10


@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_two_keys_do_not_share_counters_even_when_raced_together(kind, monkeypatch):
    monkeypatch.setattr(autocommit, "POOL_SIZE", 16)
    a, b = limiter(kind, fresh("a"), 10), limiter(kind, fresh("b"), 10)
    assert [sum(g) for g in race([a, b], 40)] == [10, 10]
    c = limiter(kind, fresh("c"), 3)
    assert [c.acquire() for _ in range(4)] == [True, True, True, False]  # a and b, spent, do not count


def test_acquire_of_n_takes_n_permits_or_none():
    bucket = TokenBucket(fresh("n"), rate=1, per=SLOW, burst=5)
    assert bucket.acquire(3) is True
    assert bucket.acquire(3) is False  # 2 left: refused whole, nothing taken
    assert bucket.acquire(2) is True
    window = SlidingWindow(fresh("n"), limit=5, window=SLOW)
    assert [window.acquire(3), window.acquire(3), window.acquire(2)] == [True, False, True]
    assert window.acquire() is False


def test_take_takes_as_many_permits_as_the_bucket_holds_and_says_when_the_next_comes(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        bucket = TokenBucket(fresh("take"), rate=2, per=10, burst=5)  # a token every 5 s
        assert bucket.take(3) == (3, 0.0)  # a new key: a full bucket
        assert bucket.take(3) == (2, 5.0)  # the 2 left; the next whole one in 5 s
        clock.shift(2)
        assert bucket.take(1) == (0, pytest.approx(3.0))  # none taken, nothing written
        clock.shift(3)
        assert bucket.take(9) == (1, 5.0)
        assert bucket.acquire() is False


def test_100_threads_taking_up_to_3_from_a_bucket_of_10_get_exactly_10_permits(monkeypatch):
    monkeypatch.setattr(autocommit, "POOL_SIZE", 16)
    bucket = TokenBucket(fresh("take-race"), rate=1, per=SLOW, burst=10)
    bucket.acquire()  # the row exists: every take goes through its lock
    barrier, granted = threading.Barrier(100), []

    def take() -> None:
        barrier.wait()
        granted.append(bucket.take(3)[0])

    threads = [threading.Thread(target=take) for _ in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(granted) == 100 and sum(granted) == 9
    assert bucket.acquire() is False


def test_permits_given_back_can_be_taken_again_up_to_the_burst(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        bucket = TokenBucket(fresh("give-back"), rate=1, per=10, burst=4)
        assert bucket.take(4) == (4, 10.0)
        bucket.give_back(3)
        assert bucket.take(4) == (3, 10.0)
        clock.shift(5)
        bucket.give_back(4)  # half a token refilled, four put back: full, no more
        assert bucket.take(9) == (4, 10.0)
        TokenBucket(fresh("give-back"), rate=1, per=10, burst=4).give_back(1)  # no row: full, no write


# -- time: refill and slide on the database clock ----------------------------------------------------
def test_a_bucket_refills_at_its_rate_up_to_its_burst(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        bucket = TokenBucket(fresh("refill"), rate=2, per=10, burst=4)  # a token every 5 s
        assert [bucket.acquire() for _ in range(5)] == [True] * 4 + [False]
        clock.shift(4.9)
        assert bucket.acquire() is False
        clock.shift(0.1)
        assert [bucket.acquire(), bucket.acquire()] == [True, False]
        clock.shift(3600)  # an hour idle refills 4 tokens, not 720
        assert [bucket.acquire() for _ in range(5)] == [True] * 4 + [False]


def test_a_sliding_window_slides_permit_by_permit_unlike_a_fixed_window(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        window = SlidingWindow(fresh("slide"), limit=3, window=10)
        assert window.acquire() is True  # t=0
        clock.shift(4)
        assert [window.acquire(), window.acquire(), window.acquire()] == [True, True, False]  # t=4
        clock.shift(5.999999)
        assert window.acquire() is False  # t=9.999999: all three are still within 10 s
        clock.shift(0.000001)
        assert [window.acquire(), window.acquire()] == [True, False]  # t=10: the permit of t=0 left
        clock.shift(4)
        assert [window.acquire(2), window.acquire()] == [True, False]  # t=14: those of t=4 left
        clock.shift(9.5)
        # t=23.5: a fixed 10 s window would have reset at t=20; the permits of t=14 still count.
        assert [window.acquire(), window.acquire()] == [True, False]


def test_a_clock_stepped_back_never_frees_room_early(python_clock):
    """A key's time never goes back: its permits count at the later of the clock and its last time."""
    with time_machine.travel(T0, tick=False) as clock:
        bucket = TokenBucket(fresh("clock"), rate=1, per=10, burst=2)
        window = SlidingWindow(fresh("clock"), limit=2, window=10)
        clock.shift(10)
        assert bucket.acquire() and window.acquire()  # t=10
        clock.shift(-5)  # t=5: the bucket counts from t=10 (no refill); the window's next stamp is t=10
        assert [bucket.acquire(), window.acquire()] == [True, False]
        clock.shift(10.5)
        # t=15.5: counted from t=5, the bucket would have refilled a token.
        assert [bucket.acquire(), window.acquire()] == [False, True]
        clock.shift(4.5)
        assert [bucket.acquire(), bucket.acquire()] == [True, False]  # t=20: one token since t=10
        assert [window.acquire(), window.acquire()] == [True, False]  # the stamp of t=10 left


# -- durability ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_a_new_process_continues_where_another_one_left_off(kind):
    key = fresh(kind)
    [out] = processes(kind, key, 3, 2, count=1)  # another process takes 2 of 3 and exits
    assert out["granted"] == 2
    mine = limiter(kind, key, 3)
    assert [mine.acquire(), mine.acquire()] == [True, False]


def test_a_permit_stays_spent_when_the_callers_transaction_rolls_back():
    bucket = TokenBucket(fresh("rollback"), rate=1, per=SLOW, burst=1)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert bucket.acquire() is True  # e.g. before a provider call ...
        raise RuntimeError("... after which the caller's transaction fails")
    assert bucket.acquire() is False
    assert RateBucket.objects.filter(key=bucket.key).exists()


def test_the_callers_open_transaction_holds_no_lock_on_the_key():
    bucket = TokenBucket(fresh("nolock"), rate=1, per=SLOW, burst=2)
    other: list[bool] = []
    with transaction.atomic():
        assert bucket.acquire() is True
        thread = threading.Thread(target=lambda: other.append(bucket.acquire()))
        thread.start()
        thread.join(timeout=10)  # while this transaction is still open
        assert other == [True]


# -- input ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "wait"), [(0, 0), (-1, 0), (11, 0), (True, 0), (1.5, 0), ("1", 0), (1, -1), (1, float("nan"))]
)
@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_bad_acquire_arguments_are_refused_before_anything_is_written(kind, n, wait):
    limit = limiter(kind, fresh(kind), 10)
    with pytest.raises(InvalidJob):
        limit.acquire(n, wait=wait)
    with pytest.raises(InvalidJob):
        asyncio.run(limit.aacquire(n, wait=wait))
    model = RateBucket if kind == "bucket" else RateWindow
    assert not model.objects.filter(key=limit.key).exists()


@pytest.mark.parametrize("key", ["x'); DROP TABLE jobq_rate_bucket; --", "ключ:🔑", "k" * 500])
def test_keys_are_stored_as_given(key):
    bucket = TokenBucket((uuid.uuid4().hex + key)[:500], 1, SLOW, 1)
    assert [bucket.acquire(), bucket.acquire()] == [True, False]
    assert RateBucket.objects.filter(key=bucket.key).exists()


# -- pruning -------------------------------------------------------------------------------------------
def test_prune_deletes_only_keys_at_rest_and_a_pruned_key_behaves_as_before(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        bucket = TokenBucket(fresh("prune"), rate=1, per=10, burst=2)  # full again 20 s after emptying
        window = SlidingWindow(fresh("prune"), limit=2, window=10)
        assert bucket.acquire(2) and window.acquire()
        clock.shift(5)
        assert window.acquire()  # the window's newest permit leaves at t=15
        prune()
        assert RateBucket.objects.filter(key=bucket.key).exists()
        assert RateWindow.objects.filter(key=window.key).exists()
        assert [bucket.acquire(), window.acquire()] == [False, False]  # nothing was given back
        clock.shift(15)  # t=20: the bucket is full, the window empty; their rest steps end at t=60
        prune()
        assert RateBucket.objects.filter(key=bucket.key).exists()
        assert RateWindow.objects.filter(key=window.key).exists()
        clock.shift(REST_STEP_SECONDS - 20)
        prune()
        assert not RateBucket.objects.filter(key=bucket.key).exists()
        assert not RateWindow.objects.filter(key=window.key).exists()
        assert [bucket.acquire(2), bucket.acquire()] == [True, False]
        assert [window.acquire(2), window.acquire()] == [True, False]


LIVE_KEYS = 20_000


def copies(model, template: str, prefix: str, count: int) -> None:
    """``count`` rows of ``model``'s table just like the row of key ``template`` (every column but the
    key), written in the test's transaction."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} SELECT (jsonb_populate_record(t, jsonb_build_object('key', %s || g))).* "
            f"FROM {table} AS t, generate_series(1, %s) AS g WHERE t.key = %s",
            [prefix, count, template],
        )
        cursor.execute(f"ANALYZE {table}")


def scans(statement: str) -> list[dict]:
    """The scan nodes of ``statement`` run under EXPLAIN ANALYZE (in the test's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", {"batch": 5000, "now": None})
        plan = cursor.fetchone()[0]
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return [node for node in plan_nodes(root) if "Scan" in node["Node Type"]]


@pytest.mark.p1
@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_the_prune_reads_the_rows_at_rest_only_however_many_keys_are_live(python_clock, kind):
    """The prune statements used to find the rows at rest with a sequential scan filtered on idle_at
    (no index, so that acquires stay HOT updates): every pass read every live key's row, 20,000 of them
    here to delete 10. They now walk an index on rest_at, idle_at rounded up to a whole step
    (REST_STEP_SECONDS): an acquire changes rest_at once per step at most, so acquires stay HOT updates
    between steps, and the prune reads the rows whose step has ended, which are all at rest."""
    model, statement = (RateBucket, ratelimit.sql.PRUNE_BUCKETS) if kind == "bucket" else (
        RateWindow, ratelimit.sql.PRUNE_WINDOWS)  # fmt: skip
    live, rest = fresh("live"), fresh("rest")
    with time_machine.travel(timezone.now() - dt.timedelta(hours=2), tick=False):
        assert limiter(kind, rest, 1).acquire()  # at rest an hour later (SLOW: a token an hour)
    assert limiter(kind, live, 1).acquire()  # at rest in an hour
    copies(model, live, "copy-live-", LIVE_KEYS)
    copies(model, rest, "copy-rest-", 10)
    row = model.objects.get(key=live)
    assert row.idle_at <= row.rest_at < row.idle_at + dt.timedelta(seconds=REST_STEP_SECONDS)
    assert row.rest_at.timestamp() % REST_STEP_SECONDS == 0
    nodes = scans(statement)
    assert [n["Node Type"] for n in nodes if n["Node Type"] == "Seq Scan"] == []
    read = sum(n["Actual Rows"] + n.get("Rows Removed by Filter", 0) for n in nodes)
    assert read < 200  # the 11 rows at rest (and any other test left), twice: found, then deleted
    assert not model.objects.filter(key__startswith="copy-rest-").exists()
    assert model.objects.filter(key__startswith="copy-live-").count() == LIVE_KEYS


@pytest.mark.p1
@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_acquires_within_one_rest_step_leave_rest_at_as_it_was(python_clock, kind):
    """rest_at, the prune's indexed column, moves only when idle_at crosses into the next step, so the
    updates of a busy key write no index entry (PostgreSQL's HOT: no indexed value changed) but once
    a step at most."""
    model, key = (RateBucket if kind == "bucket" else RateWindow), fresh("steps")
    limit = TokenBucket(key, rate=100, per=1, burst=100) if kind == "bucket" else SlidingWindow(key, 100, 1)
    seen = []
    with time_machine.travel(T0, tick=False) as clock:
        for _ in range(20):  # one acquire every 0.25 s for 5 s: idle_at moves with each
            assert limit.acquire()
            row = model.objects.get(key=key)
            seen.append((row.idle_at, row.rest_at))
            clock.shift(0.25)
        clock.move_to(T0 + dt.timedelta(seconds=REST_STEP_SECONDS))
        assert limit.acquire()
        later = model.objects.get(key=key).rest_at
    assert len({idle for idle, _ in seen}) == 20
    assert {rest for _, rest in seen} == {T0 + dt.timedelta(seconds=REST_STEP_SECONDS)}
    assert later == T0 + dt.timedelta(seconds=2 * REST_STEP_SECONDS)
