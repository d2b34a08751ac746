"""The scheduler on each engine: a pass publishes each due tick once, a settings sync writes only what
changed, and six passes racing on the same due ticks publish exactly one job per tick."""

import datetime as dt
import threading

import pytest
import time_machine
from django.db import connections

from django_jobq.models import Job, Schedule, ScheduleTick
from django_jobq.scheduler import Scheduler

pytestmark = [pytest.mark.contract, pytest.mark.p0]

T0 = dt.datetime(2026, 4, 1, 9, 0, 30, tzinfo=dt.UTC)


def make(name: str, **fields) -> Schedule:
    schedule = Schedule(name=name, task="test.noop", **fields)
    schedule.full_clean()
    schedule.save()
    return schedule


@pytest.mark.django_db
def test_a_pass_publishes_each_due_tick_once_and_advances(python_clock):
    make("every-minute", cron="* * * * *", timezone="UTC")
    with time_machine.travel(T0, tick=False) as clock:
        assert Scheduler().run_once().started == ["every-minute"]  # new: it only gets its next tick
        assert Schedule.objects.get().next_run_at == dt.datetime(2026, 4, 1, 9, 1, tzinfo=dt.UTC)
        clock.shift(60)
        tick = dt.datetime(2026, 4, 1, 9, 1, tzinfo=dt.UTC)
        assert Scheduler().run_once().published == {"every-minute": [tick]}
        assert Scheduler().run_once().published == {}  # the same tick is never published twice
    job = Job.objects.get()
    assert job.dedupe_key.startswith("schedule:every-minute:")
    assert ScheduleTick.objects.get().job_id == job.id
    assert Schedule.objects.get().next_run_at == dt.datetime(2026, 4, 1, 9, 2, tzinfo=dt.UTC)


@pytest.mark.django_db
def test_schedules_that_keep_failing_at_enqueue_never_keep_a_pass_from_the_ones_after_them(python_clock):
    """Schedules whose enqueue fails stay due with their old next_run_at, so they sort first in every
    batch (next_run_at, id). A pass used to lock the same failing rows again in each of its batches: with
    at least a batch of them (BATCH, 500, by default; 5 here) it never reached a later schedule, in any
    pass, for as long as they failed (forever under "latest"). A pass now leaves out what it already
    tried, so every due schedule is reached, and the failing ones are tried once per pass."""
    due = dt.datetime(2026, 4, 1, 9, 0, tzinfo=dt.UTC)
    with time_machine.travel(T0, tick=False):
        for n in range(5):  # a task removed from the code after its schedules were made: UnknownTask
            Schedule.objects.create(name=f"gone{n}", task="test.removed", cron="* * * * *", missed="latest",
                                    next_run_at=due)  # fmt: skip
        make("later", cron="* * * * *", next_run_at=due)
        result = Scheduler(batch=5).run_once()
    assert sorted(result.failed) == [f"gone{n}" for n in range(5)]
    assert result.published == {"later": [due]}
    assert list(Job.objects.values_list("dedupe_key", flat=True)) == ["schedule:later:2026-04-01T09:00:00Z"]
    left = Schedule.objects.filter(name__startswith="gone").values_list("next_run_at", flat=True)
    assert set(left) == {due}  # still due: tried again on the next pass


@pytest.mark.django_db
def test_the_settings_sync_writes_what_changed_and_disables_what_was_removed(settings):
    entry = {"TASK": "test.noop", "CRON": "*/5 * * * *"}
    settings.JOBQ = {**settings.JOBQ, "SCHEDULES": {"five": entry}}
    assert Job.objects.sync_schedules(_settings_schedules()) == (["five"], [])
    assert Job.objects.sync_schedules(_settings_schedules()) == ([], [])  # unchanged: not written
    settings.JOBQ = {**settings.JOBQ, "SCHEDULES": {}}
    assert Job.objects.sync_schedules(_settings_schedules()) == ([], ["five"])
    assert Schedule.objects.get(name="five").enabled is False


def _settings_schedules():
    from django_jobq.conf import jobq_settings

    return jobq_settings().schedules.values()


@pytest.mark.django_db(transaction=True)
def test_six_passes_racing_on_the_same_due_ticks_publish_exactly_one_job_per_tick():
    names = [f"race{n}" for n in range(30)]
    for name in names:
        make(name, cron="0 0 1 1 *", timezone="UTC", missed="latest")
    this_year = dt.datetime.now(dt.UTC).replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    Schedule.objects.update(next_run_at=this_year)  # the last tick (1 January) is due
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
