"""A streaming standby of the test database's server, for the read-replica tests: a base backup
(``pg_basebackup -R``) of the local server in a temporary directory, started with pg_ctl on a port of
its own (JOBQ_TEST_REPLICA_PORT, else a free one), served as the Django alias "replica" (a TEST MIRROR
of "default": same database name), stopped and removed afterwards. Needs the server on this machine
and its pg_ctl; run as root, the server's files belong to the postgres user."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from django.db import connections

from .pgcluster import LOCAL_HOSTS, reload, setting

ALIAS = "replica"
# Added to the server's pg_hba.conf for the base backup when it refuses replication connections (a
# cluster whose trust lines name "all" databases only: "all" does not match replication), removed after.
REPLICATION_LINE = "host replication all 127.0.0.1/32 trust  # jobq-tests"
WAIT_SECONDS = 120
# A standby refuses to start with less of these than its primary has.
AT_LEAST_PRIMARY = (
    "max_connections", "max_worker_processes", "max_wal_senders", "max_prepared_transactions",
    "max_locks_per_transaction",
)  # fmt: skip  # bound on the standby's start and on a wait for replay (a loaded machine)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Standby:
    def __init__(self) -> None:
        primary = connections["default"]
        self.primary = primary
        self.port = int(os.environ.get("JOBQ_TEST_REPLICA_PORT") or free_port())
        self.bindir = self._bindir()
        self.root = Path(tempfile.mkdtemp(prefix="jobq-standby-"))
        self.data = self.root / "data"
        self.log = self.root / "standby.log"
        self.hba_line_added = False

    @staticmethod
    def problem() -> str | None:
        """Why no standby can be started here, or None."""
        settings = connections["default"].settings_dict
        if ALIAS not in connections:
            return f"no {ALIAS!r} alias in these settings (tests.settings has it)"
        if connections["default"].vendor != "postgresql" or settings.get("HOST") not in LOCAL_HOSTS:
            return "a standby needs the test database's PostgreSQL on this machine"
        if not shutil.which("pg_basebackup"):
            return "no pg_basebackup on PATH"
        return None

    def _bindir(self) -> Path:
        with self.primary.cursor() as cursor:
            cursor.execute("SELECT current_setting('server_version_num')::int / 10000")
            major = cursor.fetchone()[0]
        for candidate in (
            Path(f"/usr/lib/postgresql/{major}/bin"),
            Path(shutil.which("pg_ctl") or "").parent,
        ):
            if (candidate / "pg_ctl").exists():
                return candidate
        raise RuntimeError(f"no pg_ctl for PostgreSQL {major}")

    def _run(self, *argv: str) -> None:
        """As the postgres user when run as root (PostgreSQL refuses root), else as ourselves."""
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=WAIT_SECONDS)

    def start(self) -> None:
        if os.geteuid() == 0:
            postgres = pwd.getpwnam("postgres")
            os.chown(self.root, postgres.pw_uid, postgres.pw_gid)
        settings = self.primary.settings_dict
        backup = (
            str(self.bindir / "pg_basebackup"), "-D", str(self.data), "-R", "-X", "stream", "-c", "fast",
            "-h", settings.get("HOST") or "127.0.0.1", "-p", str(settings.get("PORT") or 5432),
            "-U", settings.get("USER") or "postgres",
        )  # fmt: skip
        try:
            self._run(*backup)
        except subprocess.CalledProcessError as exc:
            if b"pg_hba.conf" not in (exc.stderr or b""):
                raise
            self._allow_replication()
            shutil.rmtree(self.data, ignore_errors=True)
            self._run(*backup)
        # A Debian cluster keeps its configuration outside the data directory: the standby gets its own.
        (self.data / "postgresql.conf").write_text(
            f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
            "hot_standby = on\nshared_buffers = 16MB\nfsync = off\n"
            + "".join(f"{name} = {self._scalar('default', f'SHOW {name}')}\n" for name in AT_LEAST_PRIMARY)
        )
        (self.data / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        (self.data / "pg_ident.conf").write_text("")
        if os.geteuid() == 0:
            for name in ("postgresql.conf", "pg_hba.conf", "pg_ident.conf"):
                shutil.chown(self.data / name, "postgres", "postgres")
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start")
        except subprocess.CalledProcessError:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            shutil.rmtree(self.root, ignore_errors=True)
            raise RuntimeError(f"the standby did not start:\n{log}") from None
        replica = connections[ALIAS]
        replica.close()
        replica.settings_dict["PORT"] = str(self.port)
        self.wait_for_replay()  # the test database is there, as of now

    def stop(self) -> None:
        connections[ALIAS].close()
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self._forbid_replication()

    def _allow_replication(self) -> None:
        hba = setting("hba_file")
        with open(hba) as handle:
            text = handle.read()
        with open(hba, "a") as handle:
            handle.write(("" if text.endswith("\n") else "\n") + REPLICATION_LINE + "\n")
        self.hba_line_added = True
        reload()

    def _forbid_replication(self) -> None:
        if not self.hba_line_added:
            return
        hba = setting("hba_file")
        with open(hba) as handle:
            lines = [line for line in handle if line.rstrip("\n") != REPLICATION_LINE]
        with open(hba, "w") as handle:
            handle.writelines(lines)
        reload()

    def _scalar(self, alias: str, sql: str, params: list[object] | None = None) -> object:
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, params or [])
            return cursor.fetchone()[0]

    def _until(self, sql: str) -> None:
        """Poll the standby until ``sql`` (given the primary's current WAL position) is true."""
        lsn = self._scalar("default", "SELECT pg_current_wal_lsn()::text")
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            try:
                if self._scalar(ALIAS, sql, [lsn]):
                    return
            except Exception:  # not accepting connections yet, or the database not streamed yet
                connections[ALIAS].close()
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"the standby did not get to {lsn} in {WAIT_SECONDS} s ({self.log})")
            time.sleep(0.05)

    def wait_for_replay(self) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        self._until("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn")

    def wait_for_receipt(self) -> None:
        """Until the standby has received (not necessarily replayed) what the primary has written."""
        self._until("SELECT pg_last_wal_receive_lsn() >= %s::pg_lsn")

    def pause_replay(self) -> None:
        self._scalar(ALIAS, "SELECT pg_wal_replay_pause()::text")

    def resume_replay(self) -> None:
        self._scalar(ALIAS, "SELECT pg_wal_replay_resume()::text")
