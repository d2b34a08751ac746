"""Clock skew: a worker (with its reaper) and a scheduler whose host clock is hours off, ahead or
behind (Debian's libfaketime, preloaded), neither reap early, nor claim a future job early,
nor let a live lease lapse, nor publish a tick early: every decision is taken on the database clock."""

from __future__ import annotations

import datetime as dt
import glob
import os
import subprocess
import sys
import time

import pytest

from django_jobq.models import Job, JobStatus, Schedule, ScheduleTick
from tests.conftest import wait_until
from tests.testapp.models import Ledger

from .support import Processes, report, sql

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

LEASE = 2.0
ENV = {
    "JOBQ_LEASE_SECONDS": str(LEASE),
    "JOBQ_HEARTBEAT_SECONDS": "0.5",
    "JOBQ_POLL_INTERVAL": "0.2",
    "JOBQ_REAP_INTERVAL": "0.5",
    # this minute's tick stays inside the grace however late in the minute the test starts and
    # however slowly the processes start (with the default 60 s, a start at :55 missed it)
    "JOBQ_SCHEDULE_GRACE_SECONDS": "600",
    "FAKETIME_DONT_FAKE_MONOTONIC": "1",  # only the wall clock is off, as on a badly set host
}
OFFSET_HOURS = 3


def libfaketime() -> str | None:
    """Debian's libfaketime (package libfaketime, pulled in by faketime), multithreaded variant."""
    found = sorted(
        glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")
        + glob.glob("/usr/lib/faketime/libfaketimeMT.so.1")
    )
    return found[0] if found else None


def skew_env(offset: str) -> dict[str, str]:
    """The environment that moves a process's wall clock by ``offset`` (preloaded directly, not through
    the faketime wrapper, which would stand between the test and the process it signals)."""
    return {**ENV, "LD_PRELOAD": str(libfaketime()), "FAKETIME": offset}


def faketime_problem(offset: str) -> str | None:
    """Why libfaketime cannot skew a Python process here, or None."""
    if libfaketime() is None:
        return "Debian's libfaketime is not installed (apt-get install faketime)"
    probe = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **skew_env(offset)},
    )  # fmt: skip
    if probe.returncode != 0:
        return f"faketime does not run Python here: {probe.stderr.strip()[:200]}"
    skew = float(probe.stdout) - time.time()
    if abs(abs(skew) - OFFSET_HOURS * 3600) > 600:
        return f"FAKETIME={offset} moved Python's clock by {skew:.0f}s"
    return None


def db_now() -> dt.datetime:
    return sql("SELECT now()")[0][0]


@pytest.mark.p0
@pytest.mark.parametrize("offset", [f"+{OFFSET_HOURS}h", f"-{OFFSET_HOURS}h"])
def test_a_skewed_worker_and_scheduler_decide_on_the_database_clock(offset, processes: Processes):
    problem = faketime_problem(offset)
    if problem:
        pytest.skip(problem)
    processes.env = ENV
    # A job held by a vanished worker, its lease expiring in 6 s (database clock).
    gone = Job.objects.enqueue("test.noop")
    Job.objects.claim_batch("gone", 1, lease_seconds=6)
    gone_lease = Job.objects.get(id=gone).lease_until
    future = Job.objects.enqueue("test.ledger", {"ms": 0}, delay=5)  # due in 5 s
    future_run_at = Job.objects.get(id=future).run_at
    longer = Job.objects.enqueue("test.ledger", {"ms": 0, "first_run_seconds": 3 * LEASE})
    # this minute's tick: due, inside the (widened) grace
    tick = sql("SELECT date_trunc('minute', now())")[0][0]
    Schedule.objects.create(name="skew", task="test.noop", cron="* * * * *")
    Schedule.objects.filter(name="skew").update(next_run_at=tick)

    skewed = {"env": skew_env(offset), "module": "tests.procs.skewed"}
    processes.worker("skewed", "--concurrency", "2", "--reap", **skewed)
    processes.start("scheduler", "jobq_scheduler", "--interval", "0.5", **skewed)
    wait_until(
        lambda: Job.objects.filter(id__in=[gone, future, longer], status=JobStatus.DONE).count() == 3
        and ScheduleTick.objects.filter(schedule="skew", tick=tick).exists(),
        timeout=90, interval=0.2, message="every job done and the tick published",
    )  # fmt: skip
    time.sleep(1.0)  # a few more scheduler passes: nothing ahead of the database clock appears
    processes.stop_all()
    now = db_now()  # after the last pass (a pass may publish the next minute's tick meanwhile)

    jobs = {j.id: j for j in Job.objects.filter(id__in=[gone, future, longer])}
    returned = [
        dt.datetime.fromisoformat(e["at"])
        for e in jobs[gone].errors
        if e["error"].startswith("lease expired")
    ]
    future_started = Ledger.objects.get(job_id=future).at
    ticks = list(ScheduleTick.objects.filter(schedule="skew").order_by("tick"))
    schedule = Schedule.objects.get(name="skew")
    report(
        "clock_skew",
        offset=offset,
        reaped_after_lease_expiry_s=[round((r - gone_lease).total_seconds(), 3) for r in returned],
        future_job_started_after_run_at_s=round((future_started - future_run_at).total_seconds(), 3),
        long_job_attempts=jobs[longer].attempts,
        ticks_published=[t.tick.isoformat() for t in ticks],
        tick_published_late_by_s=[round((t.published_at - t.tick).total_seconds(), 3) for t in ticks],
        next_run_at_in_s=round((schedule.next_run_at - now).total_seconds(), 3),
    )  # fmt: skip
    assert len(returned) == 1 and returned[0] >= gone_lease  # reaped once, not before its lease ended
    assert jobs[gone].attempts == 2
    assert future_started >= future_run_at  # not claimed before it was due
    assert (jobs[longer].attempts, jobs[longer].fence) == (1, 1)  # its lease was renewed, never lapsed
    assert ticks and ticks[0].tick == tick
    assert all(t.tick <= t.published_at <= now for t in ticks)  # no tick before its time
    assert all(Job.objects.filter(id=t.job_id).exists() for t in ticks)
    # the next tick, on the database clock: the one after the last published (a pass every 0.5 s,
    # so it may have come due in the last moments), never hours off
    assert schedule.next_run_at == ticks[-1].tick + dt.timedelta(minutes=1)
    assert now - dt.timedelta(seconds=5) < schedule.next_run_at <= now + dt.timedelta(minutes=1)
