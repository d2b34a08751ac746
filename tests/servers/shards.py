"""PostgreSQL servers of their own for the shard tests (django_jobq.shards): each a fresh cluster
(initdb) in a temporary directory on a free port, started and stopped with pg_ctl, served as a Django
alias added while the tests run (settings.DATABASES and django.db.connections), migrated there. Run
as root, the cluster's files belong to the postgres user (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from .standby import free_port

DATABASE = "jobq_shard"
WAIT_SECONDS = 120


def bindir() -> Path | None:
    """The directory of initdb and pg_ctl of the newest PostgreSQL on this machine, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def problem() -> str | None:
    """Why no shard server can be started here, or None."""
    if connections["default"].vendor != "postgresql":
        return "shards need PostgreSQL"
    if bindir() is None:
        return "no initdb on this machine (PostgreSQL's server package)"
    return None


class ShardServer:
    """One cluster, served as ``alias``."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.port = free_port()
        self.bindir = bindir()
        self.root = Path(tempfile.mkdtemp(prefix=f"jobq-{alias}-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=WAIT_SECONDS)

    def create(self) -> None:
        if os.geteuid() == 0:
            postgres = pwd.getpwnam("postgres")
            os.chown(self.root, postgres.pw_uid, postgres.pw_gid)
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync",
        )  # fmt: skip
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                "shared_buffers = 16MB\nfsync = off\nsynchronous_commit = off\nmax_connections = 60\n"
            )
        self.start()
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:  # fmt: skip
            conn.execute(f"CREATE DATABASE {DATABASE}")
        settings.DATABASES[self.alias] = self.settings_dict()

    def settings_dict(self) -> dict[str, Any]:
        base = {k: v for k, v in connections["default"].settings_dict.items() if k != "TEST"}
        return {
            **base, "NAME": DATABASE, "HOST": "127.0.0.1", "PORT": str(self.port), "USER": "postgres",
            "PASSWORD": "",
            "TEST": {"CHARSET": None, "COLLATION": None, "MIGRATE": True, "MIRROR": None, "NAME": DATABASE},
        }  # fmt: skip

    def start(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start")
        except subprocess.CalledProcessError:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"shard server {self.alias} did not start:\n{log}") from None

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (it can be started again)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        if self.alias in connections.settings:
            connections[self.alias].close()
        settings.DATABASES.pop(self.alias, None)
        with contextlib.suppress(subprocess.CalledProcessError):  # stopped already
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


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
