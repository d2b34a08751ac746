"""The reaper's loop survives the database going away under any of its connections."""

import threading

import psycopg
import pytest
from django.db import connections

from django_jobq import ratelimit
from django_jobq.reaper import Reaper
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.p0
def test_a_lost_rate_limit_connection_does_not_end_the_reaper(monkeypatch):
    """The rate-limit prune runs on the autocommit pool (psycopg, not Django): a restart of the
    database there is retried on the next pass like any other database error."""
    calls = []
    real_prune = ratelimit.prune

    def prune(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")
        return real_prune(**kwargs)

    monkeypatch.setattr(ratelimit, "prune", prune)
    stopping = threading.Event()
    reaper = Reaper(interval=0.05)

    def run():
        try:
            reaper.run(stopping)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(calls) >= 3, timeout=10, message="passes after the error")
        assert thread.is_alive()
    finally:
        stopping.set()
        thread.join(10)
    assert not thread.is_alive()
