"""manage.py jobq_queue pause|resume|status, and paused queues in manage.py jobq_stats."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError

from django_jobq.managers import JobManager, NewJob
from django_jobq.models import Job, QueueState

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("jobq_queue", *args, stdout=out)
    return out.getvalue()


def test_pause_and_resume_say_what_they_did():
    assert run("pause", "emails") == "queue emails: paused\n"
    assert run("pause", "emails") == "queue emails: already paused\n"
    assert Job.objects.paused_queues() == ["emails"]
    assert QueueState.objects.get(name="emails").changed_by == "manage.py jobq_queue"
    assert run("resume", "emails") == "queue emails: resumed\n"
    assert run("resume", "emails") == "queue emails: was not paused\n"
    assert Job.objects.paused_queues() == []


def test_status_gives_the_state_and_the_counts():
    Job.objects.enqueue_many(NewJob("test.noop", queue="emails") for _ in range(3))
    assert (
        run("status", "emails")
        == "queue emails: running\n  pending 3  running 0  done 0  dead 0  cancelled 0  waiting 0\n"
    )
    Job.objects.pause_queue("emails", by="alice")
    out = run("status", "emails")
    assert out.startswith("queue emails: paused since ") and " by alice\n" in out
    assert out.endswith("  pending 3  running 0  done 0  dead 0  cancelled 0  waiting 0\n")


def test_status_without_a_name_lists_the_paused_queues():
    assert run("status") == "paused queues: none\n"
    Job.objects.pause_queue("emails")
    Job.objects.pause_queue("billing")
    assert run("status") == "paused queues: billing, emails\n"


@pytest.mark.parametrize("action", ["pause", "resume", "status"])
@pytest.mark.parametrize("name", ["*", " emails", "a\x00b", "x" * 201])
def test_bad_names_are_a_command_error(action, name):
    with pytest.raises(CommandError, match="bad queue name"):
        run(action, name)
    assert not QueueState.objects.exists()


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_and_resume_need_a_name(action):
    with pytest.raises(CommandError, match=f"{action} needs the name of a queue"):
        run(action)


def test_an_unknown_action_is_refused():
    with pytest.raises(CommandError, match="invalid choice"):
        run("drop", "emails")


def test_a_database_error_is_a_command_error(monkeypatch):
    def broken(self, *args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(JobManager, "pause_queue", broken)
    with pytest.raises(CommandError, match="could not be reached: connection refused"):
        run("pause", "emails")


def test_jobq_stats_shows_the_paused_queues():
    Job.objects.enqueue("test.noop", queue="emails")
    Job.objects.pause_queue("emails", by="alice")
    out = io.StringIO()
    call_command("jobq_stats", stdout=out)
    lines = out.getvalue().splitlines()
    assert any(line.startswith("emails (paused) ") for line in lines)
    assert any(line.startswith("paused: emails since ") and line.endswith(" by alice") for line in lines)
    out = io.StringIO()
    call_command("jobq_stats", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["queues"][0]["paused"] is True and data["paused"][0]["by"] == "alice"
