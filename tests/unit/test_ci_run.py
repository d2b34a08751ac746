""".ci/run's start_postgres, run by bash in a sandbox: a fake /etc/postgresql and /usr/lib/postgresql
under PG_SYSROOT, and pg_isready, pg_ctlcluster, pg_createcluster and apt-get stubbed on PATH (they
record their calls; pg_isready answers once a cluster was started). No real cluster is touched."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.unit, pytest.mark.p1]

SCRIPT = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
STUBS = {
    "pg_isready": '[ -e "$STATE/started" ]',
    "pg_ctlcluster": 'echo "pg_ctlcluster $*" >> "$STATE/calls"; touch "$STATE/started"',
    "pg_createcluster": (
        'echo "pg_createcluster $*" >> "$STATE/calls"; mkdir -p "$PG_SYSROOT/etc/postgresql/$1/$2"; '
        'echo "port = $4" > "$PG_SYSROOT/etc/postgresql/$1/$2/postgresql.conf"'
    ),
    "apt-get": 'echo "apt-get $*" >> "$STATE/calls"; exit 1',
}
HBA = "local all postgres peer\nhost all all 127.0.0.1/32 scram-sha-256\n"


def function(name: str) -> str:
    match = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", SCRIPT, re.M | re.S)
    assert match, f".ci/run has no function {name}"
    return match[0]


@pytest.fixture
def sandbox(tmp_path):
    """A machine with PostgreSQL 15 and 16 installed, one stopped cluster 15/main on port 5432."""
    bin_dir, state, root = tmp_path / "bin", tmp_path / "state", tmp_path / "root"
    for directory in (bin_dir, state, root / "usr/lib/postgresql/15", root / "usr/lib/postgresql/16"):
        directory.mkdir(parents=True)
    for name, body in STUBS.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    main = root / "etc/postgresql/15/main"
    main.mkdir(parents=True)
    (main / "postgresql.conf").write_text("port = 5432\n")
    (main / "pg_hba.conf").write_text(HBA)
    return tmp_path


def start_postgres(sandbox: Path, *, port: int = 5432, ci: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(
        PATH=f"{sandbox / 'bin'}:{env['PATH']}",
        PG_SYSROOT=str(sandbox / "root"),
        STATE=str(sandbox / "state"),
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/jobq",
    )
    if ci is not None:
        env["CI"] = ci
    code = "set -euo pipefail\n" + function("db_host_port") + function("start_postgres") + "start_postgres\n"
    assert '"$root"/etc/postgresql' in code, "start_postgres would read the machine's /etc/postgresql"
    proc = subprocess.run(["bash", "-c", code], env=env, capture_output=True, text=True, timeout=60)
    calls = sandbox / "state" / "calls"
    return proc, calls.read_text().splitlines() if calls.exists() else []


def hba(sandbox: Path) -> str:
    return (sandbox / "root/etc/postgresql/15/main/pg_hba.conf").read_text()


def test_a_stopped_cluster_of_the_machine_is_neither_changed_nor_started_outside_ci(sandbox):
    proc, calls = start_postgres(sandbox)
    assert proc.returncode == 1
    assert "15/main (port 5432) is not running" in proc.stderr
    assert "CI=true" in proc.stderr
    assert hba(sandbox) == HBA
    assert calls == []


def test_on_ci_it_says_so_before_adding_trust_lines_to_an_existing_cluster_and_starts_it(sandbox):
    proc, calls = start_postgres(sandbox, ci="true")
    assert proc.returncode == 0, proc.stderr
    hba_path = sandbox / "root/etc/postgresql/15/main/pg_hba.conf"
    assert f"CI=true: adding trust lines for local connections to {hba_path}" in proc.stderr
    assert hba(sandbox).startswith("host all all 127.0.0.1/32 trust\n")
    assert hba(sandbox).endswith(HBA)
    assert calls == ["pg_ctlcluster --skip-systemctl-redirect 15 main start"]


def test_with_no_cluster_on_the_port_it_creates_its_own_with_trust_auth_and_touches_no_other(sandbox):
    proc, calls = start_postgres(sandbox, port=5433)
    assert proc.returncode == 0, proc.stderr
    assert calls == [
        "pg_createcluster 16 jobq --port 5433 -- --auth=trust",
        "pg_ctlcluster --skip-systemctl-redirect 16 jobq start",
    ]
    assert hba(sandbox) == HBA
    # Once created, a later run starts it again, still without asking.
    (sandbox / "state" / "started").unlink()
    proc, calls = start_postgres(sandbox, port=5433)
    assert proc.returncode == 0, proc.stderr
    assert calls[-1] == "pg_ctlcluster --skip-systemctl-redirect 16 jobq start"
