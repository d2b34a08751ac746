"""The local Debian PostgreSQL cluster that serves the test database: found from its port with
pg_lsclusters (never assumed to be "main"), restarted with pg_ctlcluster, and its network settings
changed and restored for the tests that need another address."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from django.db import connection

LOCAL_HOSTS = ("127.0.0.1", "localhost", "", None)


@dataclass(frozen=True, slots=True)
class Cluster:
    version: str
    name: str
    port: int


def test_port() -> int:
    return int(connection.settings_dict.get("PORT") or 5432)


def restart_problem() -> str | None:
    """Why this test run cannot restart the database's cluster, or None."""
    if os.geteuid() != 0:
        return "restarting PostgreSQL needs root"
    if not shutil.which("pg_ctlcluster") or not shutil.which("pg_lsclusters"):
        return "no pg_ctlcluster: this PostgreSQL is not a local Debian cluster"
    if connection.settings_dict.get("HOST") not in LOCAL_HOSTS:
        return "the test database is not on this machine"
    if cluster() is None:
        return f"no local cluster listens on port {test_port()}"
    return None


def cluster(port: int | None = None) -> Cluster | None:
    """The cluster pg_lsclusters lists on ``port`` (default: the test database's)."""
    port = test_port() if port is None else port
    out = subprocess.run(["pg_lsclusters", "--no-header"], check=True, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == str(port):
            return Cluster(fields[0], fields[1], port)
    return None


def restart(mode: str = "fast") -> float:
    """Restart the test database's cluster (``-m fast`` or ``-m immediate``); seconds it took."""
    found = cluster()
    assert found is not None, f"no local cluster on port {test_port()}"
    started = time.monotonic()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", found.version, found.name, "restart", "-m", mode],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    connection.close()
    return time.monotonic() - started


def reload() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_reload_conf()")


def setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return str(cursor.fetchone()[0])


class Reachable:
    """Let clients from ``network`` (e.g. "10.77.0.0/24") connect: listen on every address and trust
    that network in pg_hba.conf. Undone by ``undo()``: the pg_hba line removed, listen_addresses reset
    (with the restart it needs) if it was changed."""

    def __init__(self, network: str) -> None:
        self.line = f"host all all {network} trust  # jobq-tests"
        self.hba = setting("hba_file")
        self.listen_before: str | None = None  # set when changed: the ALTER SYSTEM value, "" if none
        self.added_line = False

    def apply(self) -> None:
        with open(self.hba) as handle:
            text = handle.read()
        if self.line not in text:
            with open(self.hba, "a") as handle:
                handle.write(("" if text.endswith("\n") else "\n") + self.line + "\n")
            self.added_line = True
            reload()
        if setting("listen_addresses").strip() != "*":
            with connection.cursor() as cursor:
                cursor.execute("SELECT setting, sourcefile FROM pg_settings WHERE name = 'listen_addresses'")
                value, source = cursor.fetchone()
                self.listen_before = value if (source or "").endswith("postgresql.auto.conf") else ""
                cursor.execute("ALTER SYSTEM SET listen_addresses = '*'")
            restart("fast")  # listen_addresses takes a restart

    def undo(self) -> None:
        if self.added_line:
            with open(self.hba) as handle:
                lines = [line for line in handle if line.rstrip("\n") != self.line]
            with open(self.hba, "w") as handle:
                handle.writelines(lines)
            reload()
        if self.listen_before is not None:
            with connection.cursor() as cursor:
                if self.listen_before:
                    cursor.execute(f"ALTER SYSTEM SET listen_addresses = '{self.listen_before}'")
                else:
                    cursor.execute("ALTER SYSTEM RESET listen_addresses")
            restart("fast")
