"""worker/outage.py: a database outage logged once as it starts, summarised every 30 s, and once as it
ends, however many threads fail meanwhile."""

import logging

import pytest

from django_jobq.worker.outage import Outage

pytestmark = pytest.mark.unit


def test_an_outage_is_logged_once_summarised_and_its_end_logged_once(caplog):
    now = [100.0]
    outage = Outage("w-1", clock=lambda: now[0])
    outage.ok()  # nothing to end
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        for _ in range(128):  # 15 s of every thread failing, 0.1 s apart
            outage.failed("the heartbeat", OSError("connection refused\nsecond line"))
            now[0] += 0.1
        now[0] += 20  # 32.8 s since the first failure
        outage.failed("a statement", OSError("server closed the connection"))
        outage.ok()
        outage.ok()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "worker w-1: the database is unreachable (the heartbeat: connection refused); retrying, further "
        "errors are summarised every 30s",
        "worker w-1: the database is still unreachable after 33s (129 failed attempts; latest, a statement: "
        "server closed the connection)",
        "worker w-1: the database is reachable again after 32.8s (129 failed attempts)",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        outage.failed("a statement", OSError("again"))  # a new outage starts over
    assert "is unreachable" in caplog.records[0].getMessage()
