"""A throwaway PostgreSQL server for the shard tests and benchmark: a fresh cluster (initdb) in a
temporary directory on a free local port, trust auth, one database, started and stopped with pg_ctl,
removed with its files. Run as root, its files belong to the postgres user (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from bench.pgbouncer import free_port

WAIT_SECONDS = 120


def bindir() -> Path | None:
    """The directory of initdb and pg_ctl of the newest PostgreSQL on this machine, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PgServer:
    """``PgServer("jobs2").create("jobq_shard")``; ``port``; ``stop()``/``start()``; ``remove()``."""

    def __init__(self, name: str) -> None:
        found = bindir()
        if found is None:
            raise FileNotFoundError("no initdb on this machine (PostgreSQL's server package)")
        self.name, self.bindir, self.port = name, found, free_port()
        self.root = Path(tempfile.mkdtemp(prefix=f"jobq-{name}-"))
        self.data, self.log = self.root / "data", self.root / "server.log"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=WAIT_SECONDS)

    def create(self, database: str, *, durable: bool = False) -> PgServer:
        """initdb, start, and create ``database`` (a fixed name of letters and underscores).
        ``durable``: fsync and synchronous_commit on, as on a real server (a benchmark's); else off."""
        if os.geteuid() == 0:
            postgres = pwd.getpwnam("postgres")
            os.chown(self.root, postgres.pw_uid, postgres.pw_gid)
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                "shared_buffers = 128MB\nmax_connections = 100\n"
                + ("" if durable else "fsync = off\nsynchronous_commit = off\n")
            )
        self.start()
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:  # fmt: skip
            conn.execute(f"CREATE DATABASE {database}")
        return self

    def start(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start")
        except subprocess.CalledProcessError:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"server {self.name} did not start:\n{log}") from None

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (it can be started again)."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # stopped already
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
