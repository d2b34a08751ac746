"""django-jobq's own autocommit connections (django_jobq.autocommit): a pooled session the server
ended is never handed out, and the pool goes with the test database, so a pytest-django suite that uses
rate limits ends without "being accessed by other users" and leaves no test database behind."""

import contextlib
import subprocess
import sys
import textwrap
import threading
import uuid

import psycopg
import pytest
from django.db import connection

from django_jobq import autocommit
from django_jobq.notify.listener import connection_params
from django_jobq.ratelimit import TokenBucket
from tests.conftest import ROOT, child_env, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.p0, pytest.mark.django_db]

SESSIONS = """
    SELECT pid FROM pg_stat_activity
    WHERE application_name = 'jobq-autocommit' AND datname = current_database()
"""


def pool_sessions() -> list[int]:
    """The backend pids of this test database's autocommit sessions, seen from another session."""
    with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
        return [pid for (pid,) in conn.execute(SESSIONS)]


def fill_the_pool() -> list[psycopg.Connection]:
    """Every one of the pool's POOL_SIZE connections opened, then given back."""
    with contextlib.ExitStack() as stack:
        held = [
            stack.enter_context(autocommit.pool("default").connection()) for _ in range(autocommit.POOL_SIZE)
        ]
    return held


def test_sessions_the_server_ended_are_never_handed_out():
    """PostgreSQL restarted (every session ended, the server back at once): no call fails."""
    autocommit.close_all()
    held = fill_the_pool()
    pids = pool_sessions()
    assert sorted(pids) == sorted(conn.info.backend_pid for conn in held)
    with psycopg.connect(**connection_params("default"), autocommit=True) as admin:
        for pid in pids:  # each waits for its backend to exit
            assert admin.execute("SELECT pg_terminate_backend(%s, 10000)", [pid]).fetchone() == (True,)
    bucket = TokenBucket(f"healed-{uuid.uuid4().hex}", rate=1, per=3600, burst=10)
    assert [bucket.acquire() for _ in range(10)] == [True] * 10
    assert all(conn.closed for conn in held)  # each ended session was discarded, none reused
    assert not set(pool_sessions()) & set(pids)


def test_the_pool_closes_when_django_connects_to_create_or_drop_a_database():
    """Django creates and drops (test) databases on a connection of its own to the server's maintenance
    database (creation's _nodb_cursor); the pool's sessions go first, so the DROP finds none."""
    autocommit.close_all()
    held = fill_the_pool()
    assert len(pool_sessions()) == autocommit.POOL_SIZE
    with autocommit.pool("default").connection() as busy:
        with connection._nodb_cursor():  # what destroy_test_db does before DROP DATABASE
            assert [conn.closed for conn in held] == [conn is not busy for conn in held]
        assert not busy.closed  # a call under way finishes ...
    assert busy.closed  # ... and its connection is closed when given back
    wait_until(lambda: pool_sessions() == [], timeout=10, message="the pool's backends to exit")
    assert TokenBucket(f"after-{uuid.uuid4().hex}", 1, 3600, 1).acquire() is True  # opened again on use


def test_a_session_lost_without_a_word_is_checked_before_use(monkeypatch):
    """Past CHECK_AFTER seconds idle, a round trip checks the session (here every time, and the
    server's last words unread, as when its host restarted)."""
    autocommit.close_all()
    conn = _one_connection()
    monkeypatch.setattr(autocommit, "CHECK_AFTER", 0)
    monkeypatch.setattr(autocommit, "_server_spoke", lambda conn: False)
    with psycopg.connect(**connection_params("default"), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 10000)", [conn.info.backend_pid])
    with autocommit.pool("default").connection() as fresh:
        assert fresh is not conn and conn.closed
        assert fresh.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize("limit", ["MAX_IDLE", "MAX_LIFETIME"])
def test_a_connection_past_its_idle_time_or_lifetime_is_closed_not_reused(monkeypatch, limit):
    autocommit.close_all()
    conn = _one_connection()
    monkeypatch.setattr(autocommit, limit, -1)
    with autocommit.pool("default").connection() as fresh:
        assert fresh is not conn and conn.closed


def _one_connection() -> psycopg.Connection:
    with autocommit.pool("default").connection() as conn:
        pass
    return conn


USERS_SUITE = """
    import pytest
    from django_jobq.ratelimit import TokenBucket

    @pytest.mark.django_db
    def test_uses_a_rate_limit():
        assert TokenBucket("k", rate=1, per=3600, burst=1).acquire() is True
"""


@pytest.mark.slow
def test_a_users_pytest_django_suite_that_uses_rate_limits_drops_its_test_database(tmp_path):
    """No fixture of ours: the user's suite only uses a rate limit."""
    name = f"{connection.settings_dict['NAME']}_suite_{uuid.uuid4().hex[:8]}"
    (tmp_path / "test_users.py").write_text(textwrap.dedent(USERS_SUITE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    db = connection.settings_dict
    env = child_env(
        DATABASE_URL=f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"
    )
    env["PYTHONPATH"] = str(ROOT)
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "test_users.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        with psycopg.connect(**connection_params("default"), autocommit=True) as conn:
            left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [f"test_{name}"]).fetchall()
            if left:  # what the suite left behind goes anyway
                conn.execute(f'DROP DATABASE "test_{name}" WITH (FORCE)')
    out = run.stdout + run.stderr
    assert "accessed by other users" not in out
    assert run.returncode == 0, out
    assert "1 passed" in out
    assert left == []


def test_a_bounded_call_answers_its_rows_or_none_and_never_waits_past_its_bound(monkeypatch):
    assert autocommit.rows_within("default", "SELECT 1, 'a'", {}, 5) == [(1, "a")]
    # a statement without rows (an INSERT without RETURNING) answers none, not an error
    assert autocommit.rows_within("default", "SET LOCAL work_mem = '4MB'", {}, 5) == []
    with pytest.raises(psycopg.errors.UndefinedTable):  # the database's own refusal, as it is
        autocommit.rows_within("default", "SELECT * FROM no_such_table", {}, 5)
    with pytest.raises(autocommit.NoAnswer, match=r"within 0\.2s"):
        autocommit.rows_within("default", "SELECT pg_sleep(2)", {}, 0.2)
    # every caller thread held up (a cut link): the next call is refused at once, never queued
    monkeypatch.setattr(autocommit, "_CALLERS", threading.BoundedSemaphore(1))
    autocommit._CALLERS.acquire()
    with pytest.raises(autocommit.NoAnswer, match="are waiting"):
        autocommit.rows_within("default", "SELECT 1", {}, 5)
