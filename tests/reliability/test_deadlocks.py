"""Deadlocks and serialisation: everything that writes jobq_job at once for a minute: worker
processes, the reaper pruning every pass, two schedulers, bulk enqueues with dedupe keys in random
order (skip, replace, debounce), the admin's bulk requeue and delete, and claims left to expire. No
deadlock (40P01) or serialisation failure (40001) reaches a log or a caller; no job is left stuck.

JOBQ_DEADLOCK_SECONDS sets another length (the suite runs 60 s; before the fixes in docs/reliability.md
this load met a deadlock every 12-24 s)."""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client

from django_jobq.managers import NewJob
from django_jobq.models import Job, JobStatus, Schedule, ScheduleTick

from .support import SERIALISATION_ERRORS, Processes, read, report, seeded, sql

pytestmark = [
    pytest.mark.integration,
    pytest.mark.serial,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

SECONDS = float(os.environ.get("JOBQ_DEADLOCK_SECONDS") or 60)
KEYS = 300  # a small key space: bulk enqueues collide on it all the time
ENV = {
    "JOBQ_LEASE_SECONDS": "3",
    "JOBQ_HEARTBEAT_SECONDS": "0.5",
    "JOBQ_POLL_INTERVAL": "0.2",
    "JOBQ_DONE_RETENTION_SECONDS": "2",  # the reaper prunes what the admin is deleting
    "JOBQ_DEAD_RETENTION_SECONDS": "5",
}
CHANGELIST = "/admin/django_jobq/job/"


class Load:
    """Caller threads in this process; each loops until stopped and keeps every exception it meets."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.counts: Counter[str] = Counter()
        self.threads: list[threading.Thread] = []

    def loop(self, name: str, step: Callable[[], None], pause: float) -> None:
        def run() -> None:
            try:
                while not self.stopping.is_set():
                    try:
                        step()
                        self.counts[name] += 1
                    except Exception:
                        self.errors.append(f"{name}: {traceback.format_exc()}")
                        connections.close_all()
                    self.stopping.wait(pause)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)
        assert not any(t.is_alive() for t in self.threads), "a caller thread hung"


def _deadlocks() -> int:
    return int(sql("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")[0][0])


@pytest.mark.p0
def test_everything_at_once_meets_no_deadlock_and_leaves_nothing_stuck(processes: Processes):
    rng = seeded()
    lock = threading.Lock()  # random.Random is not for sharing between threads unguarded
    processes.env = ENV
    admin = get_user_model().objects.create_superuser("chaos", "chaos@example.com", "chaos")
    for n in range(20):
        Schedule.objects.create(name=f"every-minute-{n}", task="test.ledger", cron="* * * * *")
    # This minute's tick is due at once: the schedulers publish from their first pass.
    Schedule.objects.update(next_run_at=sql("SELECT date_trunc('minute', now())")[0][0])
    deadlocks_before = _deadlocks()

    for n in range(2):
        processes.worker(f"worker{n}", "--concurrency", "4")
        processes.start(f"scheduler{n}", "jobq_scheduler", "--interval", "0.5")
    processes.start("reaper", "jobq_reap", "--interval", "0.2")

    def pick(population, k):
        with lock:
            return rng.sample(population, min(k, len(population)))

    def bulk_enqueue() -> None:
        with lock:
            keys = [f"k{rng.randrange(KEYS)}" for _ in range(40)]  # random order, repeats inside a batch
            mode = rng.choice(["skip", "replace"])
            jobs = [NewJob("test.ledger", {"ms": rng.randint(1, 30)}, dedupe_key=k) for k in keys]
            jobs += [NewJob("test.permanent", max_attempts=1, dedupe_key=f"p{rng.randrange(KEYS)}")
                     for _ in range(5)]  # fmt: skip
        Job.objects.enqueue_many(jobs, on_duplicate=mode)

    def debounce() -> None:
        with lock:
            key = f"k{rng.randrange(KEYS)}"
        Job.objects.enqueue("test.ledger", {"ms": 1}, dedupe_key=key, on_duplicate="debounce", delay=0.2)

    def claim_and_vanish() -> None:  # a worker that dies holding its claims: the reaper's work
        Job.objects.claim_batch(f"ghost-{threading.get_ident()}", 10, lease_seconds=0.5)

    clients = {name: Client() for name in ("requeue", "delete")}  # one per thread
    for client in clients.values():
        client.force_login(admin)

    def admin_requeue() -> None:
        dead = list(Job.objects.filter(status=JobStatus.DEAD).values_list("id", flat=True)[:500])
        ids = pick(dead, 50)
        if ids:
            response = clients["requeue"].post(
                CHANGELIST, {"action": "requeue_selected", "_selected_action": ids, "post": "yes"}
            )
            assert response.status_code == 302, response.status_code

    def admin_delete() -> None:
        finished = list(
            Job.objects.filter(status__in=[JobStatus.DONE, JobStatus.DEAD]).values_list("id", flat=True)[:500]
        )
        ids = pick(finished, 50)
        if ids:
            data = {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
            response = clients["delete"].post(CHANGELIST, data)
            assert response.status_code == 302, response.status_code

    load = Load()
    try:
        for n in range(2):
            load.loop(f"bulk_enqueue{n}", bulk_enqueue, 0.05)
        load.loop("debounce", debounce, 0.02)
        load.loop("claim_and_vanish", claim_and_vanish, 0.5)
        load.loop("admin_requeue", admin_requeue, 0.2)
        load.loop("admin_delete", admin_delete, 0.2)
        time.sleep(SECONDS)
    finally:
        load.stop()
    # Drain: every job left runs to DONE or DEAD (the schedulers may add a tick's jobs meanwhile).
    drained_in = time.monotonic()

    def settled() -> bool:
        counts = Job.objects.counts()
        return counts["PENDING"] == 0 and counts["RUNNING"] == 0

    deadline = time.monotonic() + 120
    while not read(settled) and time.monotonic() < deadline:
        time.sleep(0.5)
    drained_in = time.monotonic() - drained_in
    counts = Job.objects.counts()
    waiting = sql("SELECT count(*) FROM pg_locks WHERE NOT granted")[0][0]
    deadlocks = _deadlocks() - deadlocks_before
    processes.stop_all()
    in_logs = processes.serialisation_errors()
    in_callers = [e for e in load.errors if SERIALISATION_ERRORS.search(e)]
    report(
        "deadlocks",
        seconds=SECONDS,
        calls=dict(load.counts),
        admin_requeued=LogEntry.objects.filter(action_flag=CHANGE, change_message__contains="Requeued").count(),
        admin_deleted=LogEntry.objects.filter(action_flag=DELETION).count(),
        ticks_published=ScheduleTick.objects.count(),
        deadlocks_detected_by_postgres=deadlocks,
        serialisation_errors_in_logs=len(in_logs),
        serialisation_errors_in_callers=len(in_callers),
        serialisation_errors_by_caller=dict(Counter(e.split(":", 1)[0] for e in in_callers)),
        other_caller_errors=len(load.errors) - len(in_callers),
        stuck=counts["PENDING"] + counts["RUNNING"],
        final_counts=counts,
        drained_in_s=round(drained_in, 1),
        lock_waits_at_end=waiting,
    )  # fmt: skip
    assert counts["PENDING"] == 0 and counts["RUNNING"] == 0, counts
    assert all(
        load.counts[name] > 0 for name in ("bulk_enqueue0", "debounce", "admin_requeue", "admin_delete")
    )
    assert len(load.errors) == len(in_callers), [e for e in load.errors if e not in in_callers][:3]
    assert in_logs == [], in_logs[:5]
    assert in_callers == [], in_callers[:3]
