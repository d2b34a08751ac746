import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = [
    "django_jobq.testing.plugin",  # the jobq and jobq_eager fixtures, tested as users use them
    "tests.servers.shards",  # shard_servers and placed: PostgreSQL servers of their own (django_jobq.shards)
]


def pytest_collection_modifyitems(config, items):
    """The soak (marker ``soak``, 30 minutes) runs only when ``-m`` names it: ``tox -e soak``."""
    if "soak" in (config.option.markexpr or ""):
        return
    kept = [item for item in items if item.get_closest_marker("soak") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture
def python_clock(settings):
    """Make every statement use timezone.now(), so time-machine moves the queue's clock."""
    settings.JOBQ = {**settings.JOBQ, "CLOCK": "python"}


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess that must use the test database this test runs against."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":  # the SQLite settings, on this test database's file
        env = {
            **os.environ,
            "JOBQ_SQLITE_PATH": str(db["NAME"]),
            "DJANGO_SETTINGS_MODULE": "tests.settings.sqlite",
            "PYTHONPATH": str(ROOT),
        }
        env.update(extra)
        return env
    url = (
        f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
    }
    env.update(extra)
    return env


def run_module(module: str, *args: str, **popen) -> subprocess.Popen:
    """Start ``python -m module args`` against the test database."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args], env=child_env(), cwd=ROOT, text=True, **popen
    )


def start_worker(*args: str, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    """A real ``manage.py jobq_worker`` process on the test database."""
    return subprocess.Popen(
        [sys.executable, "-m", "django", "jobq_worker", *args],
        env=child_env(**(env or {})),
        cwd=ROOT,
        text=True,
        **popen,
    )


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05, message: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@pytest.fixture
def worker_thread():
    """Run an in-process Worker in a thread; stopped (and checked to have stopped) at teardown."""
    import threading

    from django_jobq.worker import Worker

    started: list[tuple[Worker, threading.Thread]] = []

    def start(lanes=None, **options) -> Worker:
        worker = Worker(lanes or {"default": 2}, **options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive(), "worker did not stop"


@pytest.fixture
def a_worker_waits():
    """Hold the idle lock as a worker whose lane waits for work does, so enqueues NOTIFY."""
    from django_jobq.notify.idle_lock import IdleLock

    held = IdleLock(lambda: None)
    held.report("default", starved=True)
    held.start()
    assert held.held.wait(10), "the idle lock was not taken"
    yield held
    held.stop()
    held.join(timeout=10)


def explain(sql: str, params: dict | None = None) -> dict:
    """The JSON plan of ``sql`` (EXPLAIN, not run) with ``params`` bound; "now" defaults to NULL."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", {"now": None, **(params or {})})
        plan = cursor.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def plan_nodes(plan: dict):
    """Every node of a plan, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


@pytest.fixture(autouse=True)
def _close_autocommit_pools():
    """Rate limits keep a small process-wide pool of connections; none outlives a test (the test
    database is dropped at the end)."""
    yield
    from django_jobq import autocommit

    autocommit.close_all()


@pytest.fixture(autouse=True)
def _close_sync_thread_connections():
    """A test that runs async code (asyncio.run + sync_to_async) leaves a Django connection in
    asgiref's sync thread, which outlives the test; close it, so no later test inherits a connection
    a PostgreSQL restart or a dropped database has ended."""
    yield
    import asyncio

    from asgiref.sync import SyncToAsync, sync_to_async
    from django.db import connections

    if getattr(SyncToAsync, "single_thread_executor", None) is not None:
        asyncio.run(sync_to_async(connections.close_all)())


def open_enqueue(count: int = 1, **options) -> tuple[threading.Thread, threading.Event, list[int]]:
    """A thread that enqueues ``count`` jobs (``options`` as for enqueue) in a transaction and keeps it
    open until ``commit`` is set; returns once the jobs are inserted (their ids in the list)."""
    from django.db import connections, transaction

    from django_jobq.models import Job

    inserted, commit, open_jobs = threading.Event(), threading.Event(), []

    def producer() -> None:
        try:
            with transaction.atomic():
                for _ in range(count):
                    open_jobs.append(Job.objects.enqueue("test.noop", **options))
                inserted.set()
                commit.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=producer)
    thread.start()
    assert inserted.wait(10)
    return thread, commit, open_jobs


@pytest.fixture
def fair(settings):
    """tests.fair_queue.QUEUE marked fair (FAIR: True); call it to mark it with other options."""
    from tests.fair_queue import QUEUE

    def configure(option=True, **more):
        settings.JOBQ = {**settings.JOBQ, "QUEUES": {QUEUE: {"FAIR": option, **more}}}

    configure()
    return configure
