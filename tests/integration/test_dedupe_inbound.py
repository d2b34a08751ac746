"""Inbound delivery dedupe: first_seen is True for exactly one caller per (namespace, key) per window,
under real threads and processes, in the caller's transaction, on the queue's clock; the reaper prunes
expired marks; bad input is refused before any query."""

import asyncio
import datetime as dt
import json
import subprocess
import threading
import time
from collections import Counter

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test import RequestFactory
from django.utils import timezone

from django_jobq import InvalidJob
from django_jobq.conf import jobq_settings
from django_jobq.dedupe import MAX_MARK_BATCHES, afirst_seen, first_seen, prune_expired_marks
from django_jobq.models import InboundMark, Job
from django_jobq.reaper import Reaper
from django_jobq.sql import POSTGRES as postgres
from django_jobq.validation import MAX_SECONDS
from tests.conftest import ROOT, explain, plan_nodes, run_module, wait_until
from tests.integration.test_readme import readme_blocks

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db]

T0 = dt.datetime(2026, 4, 1, 9, 0, tzinfo=dt.UTC)
DAY = 24 * 3600


def _race(n: int, target) -> list:
    """Run target() in n threads released together, each on its own connection; their results."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("atomic", [False, True], ids=["autocommit", "in-transaction"])
def test_32_threads_at_once_exactly_one_is_first(atomic):
    def call() -> bool:
        if atomic:
            with transaction.atomic():
                return first_seen("race", "evt-1", 60)
        return first_seen("race", "evt-1", 60)

    assert Counter(_race(32, call)) == {True: 1, False: 31}
    assert InboundMark.objects.filter(namespace="race", key="evt-1").count() == 1


@pytest.mark.django_db(transaction=True)
def test_32_threads_on_an_expired_mark_exactly_one_renews_it():
    past = timezone.now() - dt.timedelta(hours=1)
    InboundMark.objects.create(namespace="race", key="evt-1", seen_at=past, expires_at=past)
    assert Counter(_race(32, lambda: first_seen("race", "evt-1", 60))) == {True: 1, False: 31}
    assert InboundMark.objects.get(namespace="race", key="evt-1").expires_at > timezone.now()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_4_processes_at_once_each_key_is_first_exactly_once():
    keys = 300
    procs = [
        run_module(
            "tests.procs.inbound_caller", "procs", str(keys), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        for _ in range(4)
    ]
    time.sleep(0.5)  # let the interpreters import Django before the start line
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    firsts = Counter(k for out in outputs for k in out["first"])
    assert set(firsts) == set(range(keys)) and max(firsts.values()) == 1
    assert InboundMark.objects.filter(namespace="procs").count() == keys


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mark", ["new", "expired"])
@pytest.mark.parametrize(("outcome", "second_is_first"), [("commit", False), ("rollback", True)])
def test_a_concurrent_duplicate_waits_for_the_first_transaction(mark, outcome, second_is_first):
    """The second caller waits on the first one's new index entry (a new pair) or on its row lock (the
    renewal of an expired mark), then decides on what the first transaction left."""
    if mark == "expired":
        past = timezone.now() - dt.timedelta(hours=1)
        InboundMark.objects.create(namespace="wait", key="evt", seen_at=past, expires_at=past)
    taken, finish = threading.Event(), threading.Event()
    pid: list[int] = []
    result: list[bool] = []

    def first() -> None:
        try:
            with transaction.atomic():
                assert first_seen("wait", "evt", 60) is True
                taken.set()
                finish.wait(30)
                if outcome == "rollback":
                    transaction.set_rollback(True)
        finally:
            connection.close()

    def second() -> None:
        try:
            connection.ensure_connection()
            pid.append(connection.connection.info.backend_pid)
            result.append(first_seen("wait", "evt", 60))
        finally:
            connection.close()

    a = threading.Thread(target=first)
    a.start()
    assert taken.wait(30)
    b = threading.Thread(target=second)
    b.start()

    def blocked() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", pid[:1] or [0])
            return cursor.fetchone() == ("Lock",)

    wait_until(blocked, timeout=30, message="the duplicate waiting for the first transaction")
    assert not result  # still waiting: the first transaction decides
    finish.set()
    a.join(30)
    b.join(30)
    assert result == [second_is_first]


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_of_a_committed_mark_takes_no_lock_on_it():
    assert first_seen("lock", "evt", 60) is True
    locked, finish = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                InboundMark.objects.select_for_update().get(namespace="lock", key="evt")
                locked.set()
                finish.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert locked.wait(30)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '10s'")  # a lock wait would fail the test here
            assert first_seen("lock", "evt", 60) is False
    finally:
        finish.set()
        thread.join(30)


def test_the_window_ends_exactly_at_ttl_and_then_starts_again(python_clock):
    def at(seconds: float) -> dt.datetime:
        return T0 + dt.timedelta(seconds=seconds)

    with time_machine.travel(T0, tick=False) as clock:
        assert first_seen("stripe", "evt", 60) is True
        clock.move_to(at(59.999999))
        assert first_seen("stripe", "evt", 60) is False  # just before the edge
        clock.move_to(at(60))
        assert first_seen("stripe", "evt", 60) is True  # at the edge: a new window from here
        clock.move_to(at(119.999999))
        assert first_seen("stripe", "evt", 60) is False
        clock.move_to(at(3600))
        assert first_seen("stripe", "evt", dt.timedelta(days=3)) is True  # after the edge
    mark = InboundMark.objects.get(namespace="stripe", key="evt")
    assert (mark.seen_at, mark.expires_at) == (at(3600), at(3600 + 3 * DAY))


def test_namespaces_are_isolated():
    assert first_seen("stripe", "evt_1", 60) is True
    assert first_seen("github", "evt_1", 60) is True  # same key, another namespace
    assert first_seen("a:b", "c", 60) is True and first_seen("a", "b:c", 60) is True  # no joined text
    assert [first_seen(ns, "evt_1", 60) for ns in ("stripe", "github")] == [False, False]


def test_a_job_dedupe_key_and_an_inbound_key_do_not_interfere():
    assert Job.objects.enqueue("test.noop", dedupe_key="evt_1") is not None
    assert first_seen("stripe", "evt_1", 60) is True
    assert Job.objects.enqueue("test.noop", dedupe_key="evt_1") is None  # still the job's duplicate
    assert first_seen("stripe", "evt_1", 60) is False
    assert Job.objects.count() == 1 and InboundMark.objects.count() == 1


def test_a_rolled_back_handler_leaves_no_mark():
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic(using=jobq_settings().database):
        assert first_seen("stripe", "evt", 60) is True
        raise Boom
    assert not InboundMark.objects.exists()
    assert first_seen("stripe", "evt", 60) is True  # the delivery is processed on its retry
    assert first_seen("stripe", "evt", 60) is False


@pytest.mark.django_db(transaction=True)
def test_the_async_twin_decides_the_same_way():
    async def scenario() -> list[bool]:
        seen = [await afirst_seen("slack", "evt", 60), await afirst_seen("slack", "evt", 60)]
        await sync_to_async(connections.close_all)()  # the executor thread's connection
        return seen

    assert asyncio.run(scenario()) == [True, False]


def test_a_reaper_pass_removes_expired_marks_and_keeps_live_ones(python_clock, settings):
    settings.JOBQ = {**settings.JOBQ, "PRUNE_BATCH": 5}
    with time_machine.travel(T0, tick=False) as clock:
        for i in range(4 * 5 + 3):  # more than one pass's MAX_MARK_BATCHES batches
            assert first_seen("short", f"evt-{i}", 10)
        for i in range(7):
            assert first_seen("long", f"evt-{i}", DAY)
        clock.shift(10)
        reaper = Reaper()
        assert reaper.run_once().pruned_marks == MAX_MARK_BATCHES * 5  # bounded per pass
        assert reaper.run_once().pruned_marks == 3  # the next pass goes on
        assert reaper.run_once().pruned_marks == 0
        assert first_seen("long", "evt-0", DAY) is False  # live marks kept
        assert first_seen("short", "evt-0", 10) is True
    assert Counter(InboundMark.objects.values_list("namespace", flat=True)) == {"long": 7, "short": 1}


def test_prune_leaves_marks_that_expire_later():
    now = timezone.now()
    InboundMark.objects.create(namespace="n", key="old", seen_at=now, expires_at=now - dt.timedelta(hours=1))
    InboundMark.objects.create(namespace="n", key="new", seen_at=now, expires_at=now + dt.timedelta(hours=1))
    assert prune_expired_marks(batch=100) == 1
    assert list(InboundMark.objects.values_list("key", flat=True)) == ["new"]


@pytest.mark.parametrize(
    ("namespace", "key", "ttl", "message"),
    [
        ("", "evt", 60, "namespace must be a non-empty string"),
        (None, "evt", 60, "namespace must be a non-empty string"),
        (b"stripe", "evt", 60, "namespace must be a non-empty string"),
        ("str\x00ipe", "evt", 60, "namespace must not contain NUL"),
        ("str\ud800ipe", "evt", 60, "namespace contains a lone surrogate"),
        ("s" * 201, "evt", 60, "namespace must be at most 200 characters"),
        ("stripe", "", 60, "key must be a non-empty string"),
        ("stripe", 123, 60, "key must be a non-empty string"),
        pytest.param("stripe", 10**5000, 60, "key must be a non-empty string", id="unprintable-int-key"),
        ("stripe", "evt\x00", 60, "key must not contain NUL"),
        ("stripe", "\udfffevt", 60, "key contains a lone surrogate"),
        ("stripe", "k" * 1001, 60, "key must be at most 1000 characters"),
        ("stripe", "🎉" * 451, 60, "key must be at most 1800 bytes"),
        ("stripe", "evt", 0, "ttl must be positive"),
        ("stripe", "evt", 1e-7, "ttl must be positive"),
        ("stripe", "evt", dt.timedelta(0), "ttl must be positive"),
        ("stripe", "evt", -1, "ttl must be a number of seconds"),
        ("stripe", "evt", dt.timedelta(seconds=-1), "ttl must be a number of seconds"),
        ("stripe", "evt", float("nan"), "ttl must be a number of seconds"),
        ("stripe", "evt", float("inf"), "ttl must be a number of seconds"),
        ("stripe", "evt", MAX_SECONDS + 1, "ttl must be a number of seconds"),
        ("stripe", "evt", dt.timedelta(days=3700), "ttl must be a number of seconds"),
        pytest.param("stripe", "evt", 10**400, "ttl must be a number of seconds", id="int-past-float-ttl"),
        ("stripe", "evt", True, "ttl must be a number of seconds"),
        ("stripe", "evt", "60", "ttl must be a number of seconds"),
        ("stripe", "evt", None, "ttl must be a number of seconds"),
    ],
)
def test_bad_input_raises_invalid_job_before_any_query(
    namespace, key, ttl, message, django_assert_num_queries
):
    with django_assert_num_queries(0), pytest.raises(InvalidJob, match=message):
        first_seen(namespace, key, ttl)
    assert not InboundMark.objects.exists()


def test_the_largest_accepted_values_are_stored():
    namespace, key = "\U0001f600" * 200, "🎉" * 450  # 800 + 1800 bytes: still one btree entry
    assert first_seen(namespace, key, MAX_SECONDS) is True
    assert first_seen(namespace, "k" * 1000, 1e-6) is True
    assert first_seen(namespace, key, 60) is False
    assert InboundMark.objects.count() == 2


@pytest.fixture
def million_marks():
    """1,000,000 live marks and 1,000 expired ones, analysed."""
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_inbound (namespace, key, seen_at, expires_at)
               SELECT 'bulk', 'evt_' || g, now(), now() + CASE WHEN g <= 1000 THEN interval '-1 hour'
                                                              ELSE interval '1 day' END
               FROM generate_series(1, 1000000) AS g"""
        )
        cursor.execute("ANALYZE jobq_inbound")


@pytest.mark.p1
@pytest.mark.slow
def test_plans_with_a_million_marks_use_the_unique_and_the_expiry_index(million_marks):
    plan = explain(postgres.FIRST_SEEN, {"namespace": "bulk", "key": "evt_5", "ttl": 60})
    assert plan["Conflict Arbiter Indexes"] == ["jobq_inbound_pkey"]
    nodes = list(plan_nodes(plan))
    assert {n.get("Index Name") for n in nodes} >= {"jobq_inbound_pkey"}  # the live-mark short cut
    assert not [n for n in nodes if "Seq Scan" in n["Node Type"]]
    prune = list(plan_nodes(explain(postgres.PRUNE_MARKS, {"batch": 5000})))
    assert {n.get("Index Name") for n in prune} >= {"jobq_inbound_expires"}
    assert not [n for n in prune if "Seq Scan" in n["Node Type"]]
    assert prune_expired_marks(batch=5000) == 1000


def test_the_documented_webhook_view_processes_each_delivery_once():
    (block,) = [
        b for b in readme_blocks(ROOT / "docs" / "inbound-dedupe.md") if "def stripe_webhook" in b.code
    ]
    namespace: dict = {"__name__": "docs"}
    exec(compile(block.code, f"docs/inbound-dedupe.md:{block.line}", "exec"), namespace)
    processed, failures = [], [RuntimeError("the handler failed")]

    def process(event: dict) -> None:
        Job.objects.enqueue("test.noop", {"event": event["id"]})  # a database write of the handler
        if failures:
            raise failures.pop()
        processed.append(event["id"])

    namespace["process"] = process
    view = namespace["stripe_webhook"]
    request = RequestFactory().post("/hooks/stripe", {"id": "evt_1"}, content_type="application/json")
    with pytest.raises(RuntimeError):
        view(request)  # a 500: no mark and no job are left
    assert not InboundMark.objects.exists() and not Job.objects.exists()
    assert [view(request).status_code for _ in range(3)] == [200, 200, 200]  # the retry, then redeliveries
    assert processed == ["evt_1"] and Job.objects.count() == 1
