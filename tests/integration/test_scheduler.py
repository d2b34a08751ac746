"""The scheduler: new schedules start from their next tick, one pass publishes every due schedule, the
missed-tick policies after an outage, the zone chain, the settings sync, and one job per tick however
many scheduler processes race (real processes) or next_run_at is moved back."""

import datetime as dt
import os
import subprocess
import sys
import threading
import time

import pytest
import time_machine
from django.db import connection, connections

from django_jobq.models import Job, JobStatus, Schedule, ScheduleSource, ScheduleTick
from django_jobq.scheduler import Scheduler
from tests.conftest import ROOT, child_env, start_worker, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db]

UTC = dt.UTC
T0 = dt.datetime(2026, 4, 1, 9, 0, 30, tzinfo=UTC)  # a Wednesday; Berlin and New York on summer time


def make(name="s", *, cron=None, at=None, **fields) -> Schedule:
    schedule = Schedule(name=name, task=fields.pop("task", "test.noop"), cron=cron, at=at, **fields)
    schedule.full_clean()
    schedule.save()
    return schedule


def tick_jobs(name: str) -> list[Job]:
    return list(Job.objects.filter(dedupe_key__startswith=f"schedule:{name}:").order_by("dedupe_key"))


def keys(name: str) -> list[str]:
    return [job.dedupe_key for job in tick_jobs(name)]


def test_a_new_schedule_starts_from_its_next_tick_and_publishes_it_once(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        make(cron="0 * * * *", payload={})
        first = Scheduler().run_once()
        schedule = Schedule.objects.get()
        assert first.started == ["s"] and first.jobs == 0 and not Job.objects.exists()
        assert schedule.next_run_at == dt.datetime(2026, 4, 1, 10, 0, tzinfo=UTC)
        clock.move_to(dt.datetime(2026, 4, 1, 10, 0, 2, tzinfo=UTC))
        assert Scheduler().run_once().jobs == 1
        assert Scheduler().run_once().jobs == 0  # the next pass finds nothing due
    schedule.refresh_from_db()
    assert keys("s") == ["schedule:s:2026-04-01T10:00:00Z"]
    assert schedule.next_run_at == dt.datetime(2026, 4, 1, 11, 0, tzinfo=UTC)
    assert schedule.last_tick_at == dt.datetime(2026, 4, 1, 10, 0, tzinfo=UTC)
    tick = ScheduleTick.objects.get()
    assert (tick.schedule, tick.job_id) == ("s", tick_jobs("s")[0].id)


def test_one_pass_with_50_due_schedules_publishes_50_jobs_and_advances_every_next_run(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        for n in range(50):
            make(f"s{n:02d}", cron="*/5 * * * *", payload={"n": n}, task="test.echo")
        assert len(Scheduler().run_once().started) == 50
        clock.move_to(dt.datetime(2026, 4, 1, 9, 5, 1, tzinfo=UTC))
        result = Scheduler().run_once()
    assert result.jobs == 50 and len(result.published) == 50
    assert Job.objects.count() == 50
    assert sorted(job.payload["n"] for job in Job.objects.all()) == list(range(50))
    assert set(Schedule.objects.values_list("next_run_at", flat=True)) == {
        dt.datetime(2026, 4, 1, 9, 10, tzinfo=UTC)
    }


@pytest.mark.parametrize(
    ("missed", "published"),
    [
        ("skip", []),
        ("latest", ["12:00"]),
        ("backfill:2", ["11:00", "12:00"]),
        ("backfill:10", ["10:00", "11:00", "12:00"]),  # at most N: all three missed
    ],
)
def test_a_three_hour_outage_under_each_missed_policy_then_the_next_window(python_clock, missed, published):
    with time_machine.travel(T0, tick=False) as clock:
        make(cron="0 * * * *", missed=missed)
        Scheduler().run_once()  # next_run_at: 10:00
        clock.move_to(dt.datetime(2026, 4, 1, 12, 59, 0, tzinfo=UTC))  # down from 09:00:30 to 12:59
        Scheduler().run_once()
        assert keys("s") == [f"schedule:s:2026-04-01T{hhmm}:00Z" for hhmm in published]
        assert Schedule.objects.get().next_run_at == dt.datetime(2026, 4, 1, 13, 0, tzinfo=UTC)
        clock.move_to(dt.datetime(2026, 4, 1, 13, 0, 1, tzinfo=UTC))
        assert Scheduler().run_once().published == {"s": [dt.datetime(2026, 4, 1, 13, 0, tzinfo=UTC)]}
    assert len(keys("s")) == len(published) + 1


def test_a_tick_is_never_published_twice_even_when_next_run_at_is_moved_back(python_clock):
    with time_machine.travel(T0, tick=False) as clock:
        make(cron="0 * * * *", missed="backfill:5")
        Scheduler().run_once()
        clock.move_to(dt.datetime(2026, 4, 1, 10, 0, 5, tzinfo=UTC))
        assert Scheduler().run_once().jobs == 1
        # An edit loaded before the pass, a restored backup, a second clock: next_run_at goes back.
        Schedule.objects.update(next_run_at=dt.datetime(2026, 4, 1, 10, 0, tzinfo=UTC))
        result = Scheduler().run_once()
    assert result.jobs == 0 and len(keys("s")) == 1
    assert Schedule.objects.get().next_run_at == dt.datetime(2026, 4, 1, 11, 0, tzinfo=UTC)


def next_run_of(settings, *, own, default, time_zone) -> dt.datetime:
    settings.TIME_ZONE = time_zone
    settings.JOBQ = {**settings.JOBQ, "CLOCK": "python", "TIMEZONE": default}
    Schedule.objects.all().delete()
    with time_machine.travel(T0, tick=False):
        make(at="09:30", timezone=own)
        Scheduler().run_once()
    return Schedule.objects.get().next_run_at


@pytest.mark.parametrize("server_tz", [None, "Pacific/Kiritimati"])
def test_the_zone_chain_is_own_then_jobq_timezone_then_time_zone_never_the_servers(settings, server_tz):
    saved = os.environ.get("TZ")
    if server_tz:
        os.environ["TZ"] = server_tz
        time.tzset()
    try:
        own = next_run_of(settings, own="America/New_York", default="Asia/Tokyo", time_zone="UTC")
        default = next_run_of(settings, own=None, default="Asia/Tokyo", time_zone="Europe/Berlin")
        project = next_run_of(settings, own=None, default=None, time_zone="Europe/Berlin")
    finally:
        if server_tz:
            os.environ.pop("TZ") if saved is None else os.environ.__setitem__("TZ", saved)
            time.tzset()
    assert own == dt.datetime(2026, 4, 1, 13, 30, tzinfo=UTC)  # 09:30 EDT
    assert default == dt.datetime(2026, 4, 2, 0, 30, tzinfo=UTC)  # 09:30 JST, on 2 April
    assert project == dt.datetime(2026, 4, 2, 7, 30, tzinfo=UTC)  # 09:30 CEST (11:00 there at T0)


def test_settings_schedules_are_synced_marked_updated_and_disabled_when_removed(settings, python_clock):
    base = settings.JOBQ
    settings.JOBQ = {**base, "SCHEDULES": {"nightly": {"TASK": "test.noop", "CRON": "30 2 * * *"}}}
    with time_machine.travel(T0, tick=False):
        Scheduler().sync()
        Scheduler().run_once()
        row = Schedule.objects.get()
        assert (row.name, row.source, row.cron, row.enabled) == (
            "nightly",
            ScheduleSource.SETTINGS,
            "30 2 * * *",
            True,
        )
        assert row.next_run_at == dt.datetime(2026, 4, 2, 2, 30, tzinfo=UTC)
        Scheduler().sync()  # unchanged: not written, next_run_at kept
        assert Schedule.objects.get().next_run_at == row.next_run_at
        settings.JOBQ = {
            **base,
            "SCHEDULES": {"nightly": {"TASK": "test.noop", "AT": "04:15", "MISSED": "latest"}},
        }
        Scheduler().sync()
        row = Schedule.objects.get()
        assert (row.cron, row.at, row.missed, row.next_run_at) == (None, "04:15", "latest", None)
        settings.JOBQ = {**base, "SCHEDULES": {}}
        Scheduler().sync()
        assert Schedule.objects.get().enabled is False


def test_a_task_can_tell_which_tick_its_job_serves(python_clock):
    from django_jobq.context import JobContext

    with time_machine.travel(T0, tick=False) as clock:
        make(cron="0 * * * *")
        Scheduler().run_once()
        clock.move_to(dt.datetime(2026, 4, 1, 10, 0, 40, tzinfo=UTC))
        Scheduler().run_once()
    job = tick_jobs("s")[0]
    context = JobContext(job_id=job.id, task=job.task, attempt=1, max_attempts=5, worker_id="w", fence=1,
                         dedupe_key=job.dedupe_key)  # fmt: skip
    assert context.scheduled_for == dt.datetime(2026, 4, 1, 10, 0, tzinfo=UTC)


def due_yearly(names: list[str]) -> None:
    """Schedules whose last tick (1 January, 00:00 UTC) is due on the database clock, under latest."""
    for name in names:
        make(name, cron="0 0 1 1 *", timezone="UTC", missed="latest")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobq_schedule SET next_run_at = date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
        )


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_six_scheduler_processes_on_the_same_due_ticks_publish_exactly_one_job_per_tick():
    names = [f"race{n}" for n in range(20)]
    due_yearly(names)
    env = child_env(TZ="Pacific/Kiritimati")  # the server's zone changes nothing
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.procs.scheduler_once",
                "--batch",
                "1",
            ],  # one schedule per transaction
            env=env,
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(6)
    ]
    assert [proc.stdout.readline() for proc in procs] == ["ready\n"] * 6  # all set up: start together
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6, outputs
    year = dt.datetime.now(UTC).year
    jobs = list(Job.objects.filter(dedupe_key__startswith="schedule:race"))
    assert sorted(job.dedupe_key for job in jobs) == sorted(
        f"schedule:{n}:{year}-01-01T00:00:00Z" for n in names
    )
    assert ScheduleTick.objects.count() == 20
    assert sum(int(out.split()[1]) for out, _ in outputs) == 20  # the six reports add up to one per tick


@pytest.mark.django_db(transaction=True)
def test_six_scheduler_threads_released_together_publish_exactly_one_job_per_tick():
    names = [f"threads{n}" for n in range(30)]
    due_yearly(names)
    barrier = threading.Barrier(6)
    results = []

    def replica():
        try:
            barrier.wait()
            results.append(Scheduler(batch=1).run_once())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=replica) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 6
    assert sorted(name for result in results for name in result.published) == sorted(names)
    assert Job.objects.count() == 30 and ScheduleTick.objects.count() == 30


@pytest.mark.django_db(transaction=True)
def test_a_pass_skips_schedules_another_pass_holds_without_waiting_for_them():
    due_yearly(["held", "free"])
    from django.db import transaction

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM jobq_schedule WHERE name = 'held' FOR UPDATE")
        other = subprocess.run(
            [sys.executable, "-m", "django", "jobq_scheduler", "--once"],
            env=child_env(), cwd=ROOT, text=True, capture_output=True, timeout=120,
        )  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert other.stdout.startswith("published 1 job(s) for 1 schedule(s)")
    assert [job.dedupe_key.split(":")[1] for job in Job.objects.all()] == ["free"]


@pytest.mark.django_db(transaction=True)
def test_jobq_worker_with_scheduler_publishes_due_ticks_and_runs_them():
    due_yearly(["in-worker"])
    worker = start_worker(
        "--scheduler", "--queues", "default", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        job = wait_until(lambda: Job.objects.filter(dedupe_key__startswith="schedule:in-worker:").first(),
                         message="the scheduled job")  # fmt: skip
        wait_until(lambda: Job.objects.get(id=job.id).status == JobStatus.DONE, message="the job done")
    finally:
        worker.terminate()
        worker.communicate(timeout=60)
    assert Schedule.objects.get().next_run_at.year == dt.datetime.now(UTC).year + 1
