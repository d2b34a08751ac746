"""The queue on its own PostgreSQL database alias ("queue", through django_jobq.routers.JobqRouter):
migrations create jobq's tables there only, enqueue joins atomic(using="queue") and not the default
database's transaction, a worker drains it, and the admin reads it. Runs in subprocesses with
tests.settings.queue_alias on two fresh databases, so the suite's own settings are untouched."""

import json

import psycopg
import pytest

from tests.integration.conftest import fresh_databases, run_python

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def two_databases():
    """Fresh "app" and "queue" databases, dropped afterwards: their URLs."""
    with fresh_databases("jobq_alias_app", "jobq_alias_queue") as urls:
        yield urls


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'jobq%%'").fetchall()
    return {row[0] for row in rows}


@pytest.mark.p1
def test_the_queue_on_a_second_database_alias(two_databases):
    app, queue = two_databases
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.settings.queue_alias",
        "DATABASE_URL": app,
        "JOBQ_QUEUE_URL": queue,
    }
    run_python(env, "-m", "django", "migrate", "--noinput")
    run_python(env, "-m", "django", "migrate", "--noinput", "--database", "queue")
    assert tables(app) == set()  # no jobq table on the default database
    assert {"jobq_job", "jobq_worker", "jobq_lease", "jobq_schedule"} <= tables(queue)
    run_python(env, "-m", "django", "check", "--fail-level", "ERROR")  # jobq.E008 passes with the router

    enqueued = json.loads(run_python(env, "-m", "tests.procs.queue_alias_probe", "enqueue"))
    with psycopg.connect(queue) as conn:
        ids = {row[0] for row in conn.execute("SELECT id FROM jobq_job").fetchall()}
    assert set(enqueued["kept"]) <= ids and enqueued["stays"] in ids  # committed on the queue's database
    assert enqueued["gone"] not in ids  # rolled back with atomic(using="queue")
    assert len(ids) == 21

    run_python(env, "-m", "django", "jobq_worker", "--burst", "--worker-id", "alias-worker")
    with psycopg.connect(queue) as conn:
        done = conn.execute(
            "SELECT count(*) FROM jobq_job WHERE status = 2 AND worker_id = 'alias-worker'"
        ).fetchone()
        assert done == (21,)
        assert conn.execute(
            "SELECT count(*) FROM jobq_worker WHERE worker_id = 'alias-worker'"
        ).fetchone() == (1,)

    found = json.loads(run_python(env, "-m", "tests.procs.queue_alias_probe", "admin"))
    assert found["done"] == 21
    pages = found["pages"]
    assert {name: page["status"] for name, page in pages.items()} == dict.fromkeys(pages, 200)
    assert "21 jobs" in pages["jobs"]["body"]
    assert "alias-worker" in pages["workers"]["body"] and "alias-worker" in pages["job"]["body"]
