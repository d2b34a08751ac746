"""Rate limits when the database cannot answer: an unreachable server, a session ended mid-statement or
a key locked past LOCK_TIMEOUT fail the call closed (RateLimitUnavailable), or let it pass with a
warning when the limiter fails open; a programming error is never mistaken for either."""

import logging
import threading

import psycopg
import pytest
from django.db import connection

from django_jobq import RateLimitUnavailable, autocommit
from django_jobq.notify.listener import connection_params
from django_jobq.ratelimit import SlidingWindow, TokenBucket
from tests.conftest import wait_until
from tests.ratelimits import SLOW, fresh, limiter

pytestmark = [pytest.mark.integration, pytest.mark.p0, pytest.mark.django_db]


@pytest.fixture
def database_down(monkeypatch):
    """New rate-limit connections go to a closed port (the server itself keeps running)."""
    real = autocommit.connection_params
    monkeypatch.setattr(autocommit, "connection_params", lambda alias: {**real(alias), "port": 1})
    autocommit.close_all()
    yield
    autocommit.close_all()


@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_an_unreachable_database_fails_closed(kind, database_down):
    with pytest.raises(RateLimitUnavailable, match="database unavailable"):
        limiter(kind, fresh(kind), 10).acquire()


@pytest.mark.parametrize("kind", ["bucket", "window"])
def test_fail_open_lets_the_call_pass_and_logs_a_warning(kind, database_down, caplog):
    key = fresh(kind)
    limit = (
        TokenBucket(key, 1, SLOW, 1, fail_open=True)
        if kind == "bucket"
        else SlidingWindow(key, 1, SLOW, fail_open=True)
    )
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        assert [limit.acquire(), limit.acquire()] == [True, True]
    assert [r.levelname for r in caplog.records if key in r.getMessage()] == ["WARNING", "WARNING"]


def test_a_session_ended_mid_statement_fails_closed_once_then_a_new_one_is_used():
    """A session that ends while idle is replaced before use (tests/integration/test_autocommit.py);
    one that ends during the statement fails the call."""
    bucket = TokenBucket(fresh("terminated"), rate=1, per=SLOW, burst=5)
    assert bucket.acquire() is True
    failed: list[BaseException] = []

    def blocked() -> None:
        try:
            bucket.acquire()
        except BaseException as exc:
            failed.append(exc)

    params = connection_params("default")
    with psycopg.connect(**params) as holder, psycopg.connect(**params, autocommit=True) as watcher:
        holder.execute("SELECT 1 FROM jobq_rate_bucket WHERE key = %s FOR UPDATE", [bucket.key])  # held
        thread = threading.Thread(target=blocked)
        thread.start()
        [pid] = wait_until(lambda: _waiting_on_a_lock(watcher), timeout=10, message="the acquire to wait")
        watcher.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])
        thread.join(timeout=10)
        holder.rollback()
    # The statement may or may not have run before the session ended: no retry, so never a permit twice.
    assert [type(exc) for exc in failed] == [RateLimitUnavailable]
    assert bucket.acquire() is True


def _waiting_on_a_lock(conn) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobq-autocommit'"
        " AND datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchall()
    return [pid for (pid,) in rows]


def test_a_key_locked_past_lock_timeout_is_unavailable(settings):
    settings.JOBQ = {**settings.JOBQ, "LOCK_TIMEOUT": 0.2}
    autocommit.close_all()  # new sessions take the new timeout
    key = fresh("locked")
    assert TokenBucket(key, 1, SLOW, 5).acquire() is True
    with connection.cursor() as cursor:  # the test's open transaction holds the key's row
        cursor.execute("SELECT 1 FROM jobq_rate_bucket WHERE key = %s FOR UPDATE", [key])
    with pytest.raises(RateLimitUnavailable, match="lock timeout"):
        TokenBucket(key, 1, SLOW, 5).acquire()
    assert TokenBucket(key, 1, SLOW, 5, fail_open=True).acquire() is True
    autocommit.close_all()


def test_programming_errors_are_not_mistaken_for_an_unreachable_database(monkeypatch):
    bucket = TokenBucket(fresh("broken-sql"), 1, SLOW, 1, fail_open=True)
    monkeypatch.setattr(TokenBucket, "_sql", "SELECT * FROM jobq_rate_no_such_table")
    with pytest.raises(psycopg.errors.UndefinedTable):
        bucket.acquire()
