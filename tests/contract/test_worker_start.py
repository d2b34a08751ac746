"""What a worker checks and says as it starts, on both engines: a feature its engine lacks refuses the
start, a lane whose queue nothing names is warned about, and the command prints a one-line banner."""

import io
import logging

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connection

from django_jobq.exceptions import ConfigurationError
from django_jobq.models import Job
from django_jobq.worker import Worker
from django_jobq.worker.startup import unnamed_lanes

pytestmark = [pytest.mark.contract]


@pytest.mark.django_db  # the engine's checks read the database's settings (SQLite's journal mode)
def test_a_queue_rate_limit_needs_an_engine_with_rate_limits(settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"outbox": {"RATE_LIMIT": "2/s"}}}
    errors = [m for m in run_checks() if m.id == "jobq.E009" and "RATE_LIMIT" in m.msg]
    if connection.vendor == "sqlite":
        assert len(errors) == 1
        assert errors[0].msg.startswith('JOBQ["QUEUES"][\'outbox\']["RATE_LIMIT"] needs rate_limits')
        with pytest.raises(ConfigurationError, match=r"RATE_LIMIT.*needs rate_limits"):
            Worker({"outbox": 1})
    else:
        assert errors == []
        Worker({"outbox": 1})  # starts


@pytest.mark.django_db
def test_only_lanes_that_nothing_names_are_unnamed(settings):
    settings.JOBQ = {**settings.JOBQ, "QUEUES": {"configured": {"MAX_DEPTH": None}}}
    Job.objects.enqueue("test.noop", {}, queue="has_jobs")
    worker = Worker({"emials": 1, "default": 1, "emails": 1, "configured": 1, "has_jobs": 1, "*": 1})
    # default and emails: the Django Tasks backend's QUEUES in the test settings; configured: JOBQ;
    # has_jobs: a pending job; "*" is never a typo
    assert unnamed_lanes(worker) == ["emials"]


@pytest.mark.django_db(transaction=True)
def test_the_command_prints_its_banner_and_warns_of_a_typo(caplog):
    out = io.StringIO()
    with caplog.at_level(logging.WARNING, logger="django_jobq"):
        call_command("jobq_worker", "--burst", "--queues", "emials:2,default:1", "--worker-id", "w-1",
                     stdout=out)  # fmt: skip
    first = out.getvalue().splitlines()[0]
    assert first.startswith(
        f"worker w-1 started: lanes emials:2,default:1; {connection.vendor} database 'default'"
    )
    assert "poll" in first
    warned = [r.getMessage() for r in caplog.records if "a typo in --queues" in r.getMessage()]
    assert len(warned) == 1 and "'emials'" in warned[0]
