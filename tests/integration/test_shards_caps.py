"""Caps across databases (django_jobq.managers.seats, seats_database): a spread queue's MAX_RUNNING and a
task's max_running hold over every database their jobs are on, since their seats live on the home
database; a queue placed on one database keeps its seats there. Against two real servers of their own
beside the test database (tests/servers/shards.py), with real in-process workers of each database
counting the bodies that run at once (tests/occupancy.py)."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from django.db import connections

from django_jobq import dashboard
from django_jobq.conf import on_database
from django_jobq.database_context import carrying_database
from django_jobq.exceptions import SeatsUnavailable
from django_jobq.managers import seats as seat_rules
from django_jobq.models import Job, JobStatus
from django_jobq.worker import Worker, seat_leases
from tests.conftest import start_worker, wait_until
from tests.occupancy import notes, peak
from tests.servers.proxy import PausableProxy
from tests.servers.shards import SHARDS, SPREAD, run_group
from tests.testapp.models import Execution

pytestmark = [pytest.mark.integration]
ALIASES = ["default", *SHARDS]


def capped(settings, queues: dict) -> None:
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {**settings.JOBQ["QUEUES"], **queues}}


def drain(lanes: list[dict[str, int]], ids: list[int]) -> None:
    """Run a worker group per entry of ``lanes`` until every job of ``ids`` is DONE, then stop them."""
    groups = [run_group(each, poll_interval=0.2) for each in lanes]
    try:
        wait_until(
            lambda: sum(Job.objects.using(a).filter(id__in=ids, status=JobStatus.DONE).count() for a in ALIASES)
            == len(ids),
            timeout=120, message="every job to finish",
        )  # fmt: skip
    finally:
        for group, _ in groups:
            group.stop()
        for _, thread in groups:
            thread.join(60)
    assert not any(thread.is_alive() for _, thread in groups)


def seat_rows(alias: str) -> dict[str, int]:
    """Seats' name -> rows of jobq_cap_seat on ``alias``."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT queue, count(*) FROM jobq_cap_seat GROUP BY queue")
        return dict(cursor.fetchall())


def test_a_caps_seats_live_on_its_queues_database_or_else_on_the_home_database(spread, settings):
    capped(settings, {"reports": {"DATABASE": "jobs2", "MAX_RUNNING": 3}})
    assert seat_rules.seats_database("reports") == "jobs2"  # placed on one database: there
    assert seat_rules.seats_database("feeds") == "default"  # spread: the home database
    assert seat_rules.seats_database("pair") == "default"  # spread over shards only: still the home one
    assert seat_rules.seats_database(seat_rules.task_seats("test.capped")) == "default"  # a task's
    assert seat_rules.seats_database("anything") == "default"
    assert seat_rules.by_database(["reports", "feeds", "archive"]) == {
        "jobs2": ["reports"], "default": ["feeds"], "jobs3": ["archive"],
    }  # fmt: skip


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_shards_worker_makes_and_takes_the_seats_of_a_cap_on_the_home_database(spread, settings):
    capped(settings, {"pair": {**SPREAD["pair"], "MAX_RUNNING": 3}})
    with on_database("jobs2"):  # no seat of "pair" exists yet: this take makes them, on the home database
        taken = Job.objects.take_seats("w-2", "pair", 3, 2)
        assert [seat for seat, _ in taken] == [0, 1]
        assert Job.objects.renew_seats("w-2", [("pair", s, f) for s, f in taken]) == {
            ("pair", s, f) for s, f in taken
        }
        assert Job.objects.release_seats("w-2", [("pair", s, f) for s, f in taken]) == 2
    assert seat_rows("default") == {"pair": 3} and not seat_rows("jobs2")
    text = dashboard.format_table(dashboard.snapshot())
    with on_database("jobs2"):
        assert "(cap 3)" in dashboard.format_table(dashboard.snapshot())  # its seats are shown at home
    assert "(0/3 seats)" in text


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_spread_queues_cap_holds_across_every_database_it_is_on(spread, settings, tmp_path):
    capped(settings, {"feeds": {**SPREAD["feeds"], "MAX_RUNNING": 2}})
    log = str(tmp_path / "feeds.log")
    ids = [
        Job.objects.enqueue("test.occupy", {"log": log, "seconds": 0.03}, queue="feeds", shard_key=f"k{n}")
        for n in range(60)
    ]
    assert {a for a in ALIASES if Job.objects.using(a).filter(id__in=ids).exists()} == set(ALIASES)
    # each database gets a "feeds" lane of 4 and a "*" lane of 3: 21 slots for the queue on each
    drain([{"feeds": 4}, {"*": 3}], ids)
    assert peak(tmp_path / "feeds.log") == (2, 60)  # the cap was used, never exceeded; each job ran once
    assert seat_rows("default").get("feeds") == 2  # one set of seats, on the home database
    assert "feeds" not in seat_rows("jobs2") and "feeds" not in seat_rows("jobs3")


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_capped_tasks_cap_holds_across_the_databases_of_its_jobs(placed, tmp_path):
    log = str(tmp_path / "task.log")
    ids = [
        Job.objects.enqueue("test.capped_occupy", {"log": log, "seconds": 0.03}, queue=queue)
        for queue in ("default", "reports", "archive")  # on default, jobs2 and jobs3
        for _ in range(15)
    ]
    drain([{"*": 3}, {"*": 3}], ids)
    assert peak(tmp_path / "task.log") == (2, 45)  # max_running=2 over the three databases
    assert seat_rows("default").get("task:test.capped_occupy") == 2
    assert not seat_rows("jobs2") and not seat_rows("jobs3")


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_placed_queue_keeps_its_seats_on_its_own_database(placed, settings, tmp_path):
    capped(settings, {"reports": {"DATABASE": "jobs2", "MAX_RUNNING": 1}})
    log = str(tmp_path / "reports.log")
    ids = [
        Job.objects.enqueue("test.occupy", {"log": log, "seconds": 0.02}, queue="reports") for _ in range(10)
    ]
    drain([{"*": 2}, {"*": 2}], ids)
    assert peak(tmp_path / "reports.log") == (1, 10)
    assert seat_rows("jobs2") == {"reports": 1}
    assert "reports" not in seat_rows("default")


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_seats_on_a_database_that_does_not_answer_hold_back_only_their_caps_jobs(
    placed, settings, monkeypatch, caplog
):
    # The home database plays no part here: "reports" (on jobs2) has its seats on jobs3, a server this
    # test can stop, as a spread queue's are on the home database.
    capped(settings, {"reports": {"DATABASE": "jobs2", "MAX_RUNNING": 1}, "ledger": {"DATABASE": "jobs2"}})
    rule = seat_rules.seats_database
    elsewhere = lambda name: "jobs3" if name == "reports" else rule(name)  # noqa: E731
    monkeypatch.setattr(seat_rules, "seats_database", elsewhere)
    monkeypatch.setattr(seat_leases, "seats_database", elsewhere)
    waiting = Job.objects.enqueue("test.record", queue="reports")
    free = [Job.objects.enqueue("test.record", queue="ledger") for _ in range(5)]
    down = placed["jobs3"]
    down.stop("fast")
    with on_database("jobs2"):  # one call for caps on two databases: the one that answers is done
        with pytest.raises(SeatsUnavailable, match="'jobs3' did not answer") as refused:
            Job.objects.take_seats_of("probe", {"ledger": (1, 1), "reports": (1, 1)})
        assert refused.value.databases == {"jobs3"}
        assert [seat for seat, _ in refused.value.partial["ledger"]] == [0]
        assert "reports" not in refused.value.partial
        assert Job.objects.release_seats("probe", [("ledger", 0, refused.value.partial["ledger"][0][1])]) == 1
    with on_database("jobs2"):
        worker = Worker({"*": 2}, poll_interval=0.2)
        thread = threading.Thread(target=carrying_database(worker.run), daemon=True)
    caplog.set_level(logging.WARNING, logger="django_jobq")
    thread.start()
    try:
        try:
            wait_until(lambda: Execution.objects.filter(job_id__in=free).count() == 5, timeout=60,
                       message="the uncapped queue's jobs ran")  # fmt: skip
            wait_until(lambda: sum("'jobs3' did not answer" in r.getMessage() for r in caplog.records) > 0,
                       message="the seat take to fail")  # fmt: skip
            assert not Execution.objects.filter(job_id=waiting).exists()
            assert worker.outage.failures == 0  # no outage of the worker's own database
        finally:
            down.start()
        wait_until(lambda: Execution.objects.filter(job_id=waiting).exists(), timeout=60,
                   message="the capped job ran once its seats' database answered")  # fmt: skip
    finally:
        worker.stop()
        thread.join(60)
    assert not thread.is_alive()
    said = [r.getMessage() for r in caplog.records]
    assert sum("did not answer" in m for m in said) == 1, said  # logged once for the whole outage
    assert any("'jobs3' answers again" in m for m in said), said
    assert seat_rows("jobs3") == {"reports": 1}


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_the_dashboard_shows_a_caps_seats_with_the_database_that_holds_them(spread, settings):
    capped(settings, {"feeds": {**SPREAD["feeds"], "MAX_RUNNING": 2},
                      "reports": {"DATABASE": "jobs2", "MAX_RUNNING": 3}})  # fmt: skip
    Job.objects.take_seats("w1", "feeds", 2, 1)
    with on_database("jobs2"):
        Job.objects.take_seats("w1", "reports", 3, 2)
        on_shard = {q.queue: q.seats for q in dashboard.snapshot().queues}
    at_home = {q.queue: q.seats for q in dashboard.snapshot().queues}
    assert (at_home["feeds"], at_home["reports"]) == (1, None)
    assert (on_shard["feeds"], on_shard["reports"]) == (None, 2)


def last_seen(alias: str, worker_id: str) -> float:
    """Seconds since the epoch of ``worker_id``'s last heartbeat on ``alias`` (the database's clock)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM last_seen_at) FROM jobq_worker WHERE worker_id = %s", [worker_id]
        )
        return float(cursor.fetchone()[0])


def clock(alias: str) -> float:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM now())")
        return float(cursor.fetchone()[0])


@pytest.mark.serial  # cuts a worker's link: never beside other database tests
@pytest.mark.slow
@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_worker_cut_off_from_its_seats_database_starts_nothing_and_keeps_its_own_leases(
    spread, settings, tmp_path
):
    """Worker A (a process) serves a queue spread over jobs2 and jobs3 and capped at 1, whose seats are
    on the home database, which A reaches through a proxy that stops forwarding while A holds the seat
    and has jobs claimed ahead. A's own databases still answer: its heartbeats there go on (a seat
    call that gets no answer is waited for half a heartbeat, never longer), it starts nothing once its
    seat may have run out and gives its claimed jobs back itself (no reaper runs); worker B takes the
    seat once its lease ran out and runs the rest. Never two bodies at once, each job once."""
    queues = {"feeds": {"DATABASES": ["jobs2", "jobs3"], "MAX_RUNNING": 1}}
    capped(settings, queues)
    settings.JOBQ = {**settings.JOBQ, "LEASE_SECONDS": 3, "HEARTBEAT_SECONDS": 1, "POLL_INTERVAL": 0.2}
    log = tmp_path / "occupy.log"
    ids = [
        Job.objects.enqueue(
            "test.occupy", {"log": str(log), "seconds": 0.02}, queue="feeds", shard_key=f"k{n}"
        )
        for n in range(300)
    ]
    db = connections["default"].settings_dict
    b = None
    with PausableProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))) as proxy:
        env = {
            "JOBQ_LEASE_SECONDS": "3", "JOBQ_HEARTBEAT_SECONDS": "1", "JOBQ_POLL_INTERVAL": "0.2",
            "JOBQ_CLAIM_AHEAD": "8", "JOBQ_QUEUES": json.dumps(queues),
            "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}",
            "JOBQ_TEST_SHARDS": json.dumps({a: [n, spread[a].port] for a, n in SHARDS.items()}),
        }  # fmt: skip
        a = start_worker("--queues", "feeds:1", "--worker-id", "A", env=env)
        try:
            wait_until(lambda: log.exists() and peak(log)[1] >= 20, timeout=60, message="A to run some jobs")
            proxy.pause()
            cut = {alias: clock(alias) for alias in SHARDS}
            with connections["default"].cursor() as cursor:  # as the server's keepalives would
                cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ANY(%s)",
                               [proxy.upstream_ports()])  # fmt: skip
            b = run_group({"feeds": 1}, poll_interval=0.2)
            done = lambda: sum(  # noqa: E731
                Job.objects.using(alias).filter(id__in=ids, status=JobStatus.DONE).count() for alias in SHARDS
            )
            wait_until(lambda: done() == 300, timeout=120, message="B to run the rest")
            for alias in SHARDS:  # A's heartbeats on its own databases went on while the link was cut
                assert last_seen(alias, "A") > cut[alias] + 1.5, alias
        finally:
            proxy.resume()
            a.terminate()
            a.wait(30)
            if b is not None:
                b[0].stop()
                b[1].join(60)
    runs = notes(log)
    assert peak(log) == (1, 300)  # never two bodies at once; each job's body ran once
    a_starts = [n.at for n in runs if n.worker_id == "A" and n.step > 0]
    b_starts = [n.at for n in runs if n.worker_id != "A" and n.step > 0]
    assert len(a_starts) >= 20 and b_starts and max(a_starts) < min(b_starts)
