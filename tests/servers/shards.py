"""PostgreSQL servers of their own for the shard tests (django_jobq.shards): each a fresh cluster
(bench/pgserver.py) on a free port, served as a Django alias added while the tests run
(settings.DATABASES and django.db.connections), migrated there; and the fixtures that start them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from bench import pgserver
from django_jobq import shards

DATABASE = "jobq_shard"


def problem() -> str | None:
    """Why no shard server can be started here, or None."""
    if connections["default"].vendor != "postgresql":
        return "shards need PostgreSQL"
    if pgserver.bindir() is None:
        return "no initdb on this machine (PostgreSQL's server package)"
    return None


class ShardServer(pgserver.PgServer):
    """A server of its own (bench/pgserver.py), served as the Django alias ``alias``."""

    def __init__(self, alias: str) -> None:
        super().__init__(alias)
        self.alias = alias

    def create(self, database: str = DATABASE) -> ShardServer:
        super().create(database)
        settings.DATABASES[self.alias] = self.settings_dict()
        return self

    def settings_dict(self) -> dict[str, Any]:
        base = {k: v for k, v in connections["default"].settings_dict.items() if k != "TEST"}
        return {
            **base, "NAME": DATABASE, "HOST": "127.0.0.1", "PORT": str(self.port), "USER": "postgres",
            "PASSWORD": "",
            "TEST": {"CHARSET": None, "COLLATION": None, "MIGRATE": True, "MIRROR": None, "NAME": DATABASE},
        }  # fmt: skip

    def remove(self) -> None:
        if self.alias in connections.settings:
            connections[self.alias].close()
            del connections[self.alias]  # a server made again later is on another port
        settings.DATABASES.pop(self.alias, None)
        super().remove()


SHARDS = {"jobs2": 1, "jobs3": 2}  # the shard tests' databases beside the test database
QUEUES = {"reports": {"DATABASE": "jobs2"}, "archive": {"DATABASE": "jobs3"}}


@pytest.fixture(scope="module")
def shard_servers(django_db_setup, django_db_blocker) -> Iterator[dict[str, ShardServer]]:
    """A server of its own for each of SHARDS, migrated, for the tests of one module."""
    if why := problem():
        pytest.skip(why)
    started = {alias: ShardServer(alias) for alias in SHARDS}
    sharded = override_settings(
        JOBQ={**settings.JOBQ, "SHARDS": SHARDS}, DATABASE_ROUTERS=["django_jobq.routers.JobqRouter"]
    )
    try:
        with django_db_blocker.unblock():
            for server in started.values():
                server.create()
            sharded.enable()
            for alias in started:
                call_command("migrate", database=alias, verbosity=0)
        yield started
    finally:
        sharded.disable()
        for server in started.values():
            server.remove()


@pytest.fixture
def placed(shard_servers, settings) -> dict[str, ShardServer]:
    """The shards, with queue "reports" on jobs2 and "archive" on jobs3."""
    settings.JOBQ = {
        **settings.JOBQ,
        "SHARDS": SHARDS,
        "QUEUES": {**settings.JOBQ.get("QUEUES", {}), **QUEUES},
    }
    settings.DATABASE_ROUTERS = ["django_jobq.routers.JobqRouter"]
    return shard_servers


SPREAD = {
    "feeds": {"DATABASES": ["default", "jobs2", "jobs3"]},  # every database
    "pair": {"DATABASES": ["jobs2", "jobs3"]},  # two shards, not the home database
}


@pytest.fixture
def spread(shard_servers, settings) -> dict[str, ShardServer]:
    """The shards, with "reports" on jobs2, "archive" on jobs3 and the SPREAD queues (no database
    passed over as unreachable by an earlier test's stopped server)."""
    shards._UNREACHABLE.clear()
    settings.JOBQ = {
        **settings.JOBQ,
        "SHARDS": SHARDS,
        "QUEUES": {**settings.JOBQ.get("QUEUES", {}), **QUEUES, **SPREAD},
    }
    settings.DATABASE_ROUTERS = ["django_jobq.routers.JobqRouter"]
    return shard_servers


def run_group(lanes: dict[str, int], **options: Any) -> tuple[Any, threading.Thread]:
    """A worker group for ``lanes`` on every database they need (django_jobq.worker.group), each
    Worker made with ``options``, running on a thread of its own: (the group, its thread)."""
    from django_jobq.worker import Worker
    from django_jobq.worker.group import WorkerGroup
    from django_jobq.worker.lanes import lanes_by_database

    group = WorkerGroup(
        lanes_by_database(lanes), lambda its, worker_id: Worker(its, worker_id=worker_id, **options)
    )
    thread = threading.Thread(target=group.run, daemon=True)
    thread.start()
    return group, thread
