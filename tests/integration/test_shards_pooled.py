"""Shards behind transaction-mode poolers (JOBQ["POOL_MODE"] = "transaction" with JOBQ["SHARDS"]): a real
PgBouncer in front of each shard's server (bench/pgbouncer.py), a worker process whose queue
connections to the shards go through them and whose LISTEN goes to each database directly
(JOBQ["LISTEN_DATABASE"] as a dict); and the settings that refuse what could not work."""

from __future__ import annotations

import json
import signal

import psycopg
import pytest
from django.db import connection, transaction

from bench import pgbouncer as bouncer
from django_jobq.conf import jobq_settings
from django_jobq.exceptions import ConfigurationError
from django_jobq.models import Job
from tests.conftest import start_worker, wait_until
from tests.servers.shards import QUEUES, SHARDS
from tests.testapp.models import Execution

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        bouncer.binary() is None, reason="pgbouncer is not installed (apt-get install pgbouncer)"
    ),
]
ALIASES = ["default", *SHARDS]
HOME = {"default": "postgres://postgres@127.0.0.1/home"}  # the home database's direct LISTEN target


def direct(server) -> str:
    return f"postgres://postgres@127.0.0.1:{server.port}/jobq_shard"


@pytest.fixture(scope="module")
def poolers(shard_servers):
    """A PgBouncer in transaction mode in front of each shard's server, for this module."""
    started = {
        alias: bouncer.PgBouncer(port=server.port, pool_size=4).start()
        for alias, server in shard_servers.items()
    }
    yield started
    for running in started.values():
        running.stop()


@pytest.mark.parametrize(
    ("listen", "message"),
    [
        ({"default": "postgres://postgres@127.0.0.1/x"}, "for shard 'jobs2' too"),
        ({**HOME, "jobs2": "postgres://h/x"}, "for shard 'jobs3' too"),
        (
            {**HOME, "jobs2": "postgres://h/x", "jobs3": "jobs3"},
            "a database of jobq's own",
        ),  # its pooled alias
        ({**HOME, "jobs2": "postgres://h/x", "jobs3": "default"}, "a database of jobq's own"),
        ({**HOME, "jobs2": "postgres://h/x", "jobs3": "postgres://h/x"}, "the same LISTEN target"),
        (
            {**HOME, "jobs2": "postgres://h/x", "jobs3": "postgres://h/y", "elsewhere": "postgres://h/z"},
            "neither",
        ),
        ({**HOME, "jobs2": "postgres://h/x", "jobs3": "not a dsn"}, r"\['jobs3'\] 'not a dsn' is neither"),
        ({**HOME, "jobs2": "postgres://h/x", "jobs3": "postgres://x\x00y@h/db"}, "NUL"),
        ({**HOME, "jobs2": "postgres://h/x", "jobs3": None}, "a PostgreSQL DSN$"),
        ({**HOME, "jobs2": "postgres://h/x", 3: "postgres://h/y"}, "keys must be database aliases"),
        ({**HOME, "jobs2": "postgres://h/x", "x'; drop table jobq_job; --": "postgres://h/y"}, "neither"),
    ],
)
def test_shards_behind_a_transaction_pooler_need_a_direct_listen_target_each(
    shard_servers, settings, listen, message
):
    settings.JOBQ = {
        **settings.JOBQ, "SHARDS": SHARDS, "POOL_MODE": "transaction", "LISTEN_DATABASE": listen,
    }  # fmt: skip
    with pytest.raises(ConfigurationError, match=message):
        jobq_settings()


def test_a_listen_dict_needs_shards(settings):
    unsharded = {key: value for key, value in settings.JOBQ.items() if key != "SHARDS"}
    settings.JOBQ = {**unsharded, "LISTEN_DATABASE": {"default": "postgres://h/x"}}
    with pytest.raises(ConfigurationError, match="only with"):
        jobq_settings()


def test_each_database_listens_on_its_own_target(shard_servers, settings):
    listen = {"default": "postgres://h/home", "jobs2": "postgres://h/two", "jobs3": "postgres://h/three"}
    settings.JOBQ = {**settings.JOBQ, "SHARDS": SHARDS, "POOL_MODE": "transaction", "LISTEN_DATABASE": listen}
    from django_jobq.conf import on_database

    assert jobq_settings().listen_database == "postgres://h/home"
    for alias in SHARDS:
        with on_database(alias):
            assert jobq_settings().listen_database == listen[alias]


def listeners(server) -> int:
    """The worker's LISTEN sessions on ``server``, connected to it directly."""
    with psycopg.connect(direct(server), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobq-listener' AND query LIKE 'LISTEN%%'"
        ).fetchone()[0]


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_a_worker_drains_every_shard_through_its_pooler_woken_by_notify(placed, poolers):
    db = connection.settings_dict
    home = (
        f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )
    env = {
        "JOBQ_TEST_SHARDS": json.dumps({alias: [n, poolers[alias].port] for alias, n in SHARDS.items()}),
        "JOBQ_TEST_LISTEN": json.dumps(
            {"default": home, **{alias: direct(placed[alias]) for alias in SHARDS}}
        ),
        "JOBQ_QUEUES": json.dumps(QUEUES),
        "JOBQ_POLL_INTERVAL": "60",  # a job runs within the test's waits only when NOTIFY woke the worker
    }
    worker = start_worker("--queues", "*:2", env=env)
    try:
        wait_until(lambda: all(listeners(placed[alias]) for alias in SHARDS), timeout=60,
                   message="the worker listening on each shard directly")  # fmt: skip
        ids = [
            Job.objects.enqueue("test.record", queue=queue)
            for queue in ("reports", "archive")
            for _ in range(20)
        ]
        with transaction.atomic():  # on the home database: through its outbox, relayed on commit
            ids.append(Job.objects.enqueue("test.record", queue="archive"))
        wait_until(lambda: Execution.objects.filter(job_id__in=ids).count() == len(ids), timeout=45,
                   message="every job run, woken by NOTIFY (the poll is 60 s)")  # fmt: skip
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0
    assert sorted(Execution.objects.filter(job_id__in=ids).values_list("job_id", flat=True)) == sorted(ids)
    for alias in SHARDS:  # the worker's queue connections to each shard were its pooler's clients
        assert "login attempt: db=jobq_shard" in poolers[alias].log(), poolers[alias].log()[-2000:]
