"""A throwaway PgBouncer in transaction mode in front of the local PostgreSQL, for the tests and the
benchmark: writes its ini and userlist in a fresh directory, runs Debian's ``pgbouncer`` binary in the
foreground on a free local port, stops it on ``stop()``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BINARY_PATHS = ("pgbouncer", "/usr/sbin/pgbouncer")


def binary() -> str | None:
    """The pgbouncer executable, or None when it is not installed."""
    for name in BINARY_PATHS:
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now (never 6432, a system PgBouncer's)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6432:
            return port


class PgBouncer:
    """``PgBouncer(server_host, server_port, user).start()``; ``url(dbname)`` is a DSN through it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 5432, user: str = "postgres", pool_size: int = 4):
        self.host, self.server_port, self.user, self.pool_size = host, port, user, pool_size
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.dir: Path | None = None

    def url(self, dbname: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def start(self, timeout: float = 15.0) -> PgBouncer:
        exe = binary()
        if exe is None:
            raise FileNotFoundError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self.dir = Path(tempfile.mkdtemp(prefix="jobq-pgbouncer-"))
        self.dir.chmod(0o755)  # readable by the user it drops to when started as root
        self.port = free_port()
        users = self.dir / "userlist.txt"
        users.write_text(f'"{self.user}" ""\n')
        run_as = "user = postgres\n" if os.geteuid() == 0 else ""  # pgbouncer refuses to run as root
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={self.host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 500\n"
            # psycopg sends none of these; Django's backend may set extra_float_digits through options.
            "ignore_startup_parameters = extra_float_digits\n"
            f"{run_as}"
        )
        for path in (users, ini):
            path.chmod(0o644)
        with (self.dir / "pgbouncer.log").open("w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([exe, str(ini)], stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start: {self.log()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen on port {self.port} within {timeout}s")

    def log(self) -> str:
        return (self.dir / "pgbouncer.log").read_text() if self.dir else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
