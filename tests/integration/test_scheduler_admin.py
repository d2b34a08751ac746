"""Schedules at definition and in the admin: bad expressions, zones, times, policies and tasks are
refused with a clear message and nothing is written (full_clean, the admin form, the system check);
the list shows each next run in the schedule's zone and in UTC; enable/disable; run now, guarded by
django_jobq.run_schedule (403 for others) and logged."""

import datetime as dt
import itertools

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.test import Client

from django_jobq.checks import check_settings
from django_jobq.models import Job, Schedule, ScheduleSource

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

LIST = "/admin/django_jobq/schedule/"
ADD = "/admin/django_jobq/schedule/add/"
_users = itertools.count()

BAD = [
    ({"cron": "61 * * * *"}, "cron", "cron expression '61 * * * *'"),
    ({"cron": "* * * *"}, "cron", "has 4 fields; it needs 5"),
    ({"cron": "09:30"}, "cron", "'09:30' is a daily time"),
    ({"at": "25:00"}, "at", "daily time '25:00' must be 'HH:MM'"),
    ({"at": "9.30"}, "at", "must be 'HH:MM'"),
    ({"cron": None, "at": None}, "cron", "exactly one"),
    ({"at": "09:30", "timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
    ({"at": "09:30", "timezone": "europe/berlin"}, "timezone", "did you mean 'Europe/Berlin'?"),
    ({"at": "09:30", "task": "test.nope"}, "task", "no task is registered as 'test.nope'"),
    ({"at": "09:30", "missed": "backfill:0"}, "missed", "'backfill:N' (N from 1 to 1000)"),
    ({"at": "09:30", "task": "test.sleep"}, "payload", "payload does not fit"),
    ({"at": "09:30", "name": "a b"}, "name", "schedule name must be"),
    ({"at": "09:30", "timezone": "UTC\x00"}, "timezone", "is not an IANA name"),
]


@pytest.mark.parametrize(("fields", "field", "message"), BAD)
def test_full_clean_refuses_a_bad_schedule_with_a_clear_message(fields, field, message):
    values = {"name": "s", "task": "test.noop", "cron": None, "at": None, "payload": {}, **fields}
    with pytest.raises(ValidationError) as caught:
        Schedule(**values).full_clean()
    assert message in " ".join(caught.value.message_dict[field])
    assert not Schedule.objects.exists()


def test_both_cron_and_at_are_refused_by_full_clean_and_by_the_database():
    schedule = Schedule(name="s", task="test.noop", cron="0 * * * *", at="09:30")
    with pytest.raises(ValidationError, match="exactly one"):
        schedule.full_clean()
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        schedule.save()


def form(**fields):
    data = {"name": "s", "task": "test.noop", "payload": "{}", "queue": "", "priority": "", "cron": "",
            "at": "", "timezone": "", "missed": "skip", "enabled": "on"}  # fmt: skip
    data.update(fields)
    return data


def test_the_admin_form_refuses_a_bad_cron_and_an_unknown_zone_and_writes_nothing(admin_client):
    page = admin_client.post(ADD, form(cron="0 25 * * *", timezone="Nowhere/City")).content.decode()
    assert "cron expression &#x27;0 25 * * *&#x27;" in page
    assert "unknown time zone &#x27;Nowhere/City&#x27;" in page
    assert not Schedule.objects.exists()


def test_the_admin_adds_a_schedule_marked_admin_with_its_next_run_left_to_the_scheduler(admin_client):
    response = admin_client.post(ADD, form(at="9:05", timezone="Europe/Berlin"))
    assert response.status_code == 302
    schedule = Schedule.objects.get()
    assert (schedule.at, schedule.cron, schedule.source, schedule.next_run_at) == (
        "09:05",
        None,
        "admin",
        None,
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"TASK": "test.noop", "CRON": "0 0 31 2 *"}, "bad day-of-month"),
        ({"TASK": "test.noop", "CRON": "09:30"}, "is a daily time"),
        ({"TASK": "test.noop", "AT": "24:00"}, "must be 'HH:MM'"),
        ({"TASK": "test.noop", "AT": "09:00", "TIMEZONE": "Berlin"}, "unknown time zone 'Berlin'"),
        ({"TASK": "test.noop", "AT": "09:00", "CRON": "* * * * *"}, "exactly one"),
        ({"TASK": "test.noop", "AT": "09:00", "EVERY": 5}, "unknown option(s) EVERY"),
        ({"TASK": "test.nope", "AT": "09:00"}, "no task is registered as 'test.nope'"),
        ({"TASK": "test.sleep", "AT": "09:00"}, "payload does not fit"),
    ],
)
def test_a_bad_settings_schedule_is_reported_by_check_jobq_e006(settings, entry, message):
    settings.JOBQ = {**settings.JOBQ, "SCHEDULES": {"nightly": entry}}
    errors = check_settings()
    assert [error.id for error in errors] == ["jobq.E006"]
    assert errors[0].msg.startswith("JOBQ[\"SCHEDULES\"]['nightly']: ") and message in errors[0].msg


def test_a_bad_default_timezone_is_a_configuration_error(settings):
    settings.JOBQ = {**settings.JOBQ, "TIMEZONE": "Local/Time"}
    assert [error.id for error in check_settings()] == ["jobq.E001"]


@pytest.fixture
def staff(django_user_model):
    def make(*codenames: str) -> Client:
        user = django_user_model.objects.create_user(f"ops{next(_users)}", password="pw", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="django_jobq", codename__in=codenames)
        )
        client = Client()
        client.force_login(user)
        return client

    return make


def test_the_list_shows_the_next_run_in_the_schedules_zone_and_in_utc(admin_client):
    Schedule.objects.create(name="berlin", task="test.noop", at="09:30", timezone="Europe/Berlin")
    Schedule.objects.filter(name="berlin").update(next_run_at=dt.datetime(2026, 4, 2, 7, 30, tzinfo=dt.UTC))
    page = admin_client.get(LIST).content.decode()
    assert "2026-04-02 09:30 CEST" in page and "2026-04-02 07:30 UTC" in page
    assert "daily at 09:30" in page and "Run now" in page


def test_disable_and_enable_toggle_an_admin_schedule_and_leave_settings_ones(admin_client):
    mine = Schedule.objects.create(name="mine", task="test.noop", cron="0 * * * *")
    Schedule.objects.filter(pk=mine.pk).update(next_run_at=dt.datetime(2026, 4, 1, 10, tzinfo=dt.UTC))
    Schedule.objects.create(name="theirs", task="test.noop", cron="0 * * * *", source=ScheduleSource.SETTINGS)
    ids = list(Schedule.objects.values_list("pk", flat=True))
    admin_client.post(LIST, {"action": "disable_schedules", "_selected_action": ids})
    assert dict(Schedule.objects.values_list("name", "enabled")) == {"mine": False, "theirs": True}
    assert Schedule.objects.get(name="mine").next_run_at is None
    admin_client.post(LIST, {"action": "enable_schedules", "_selected_action": ids})
    assert Schedule.objects.get(name="mine").enabled is True
    assert LogEntry.objects.filter(change_message__startswith="Schedule").count() == 2


def test_run_now_enqueues_one_job_logs_it_and_keeps_next_run_at(admin_client):
    schedule = Schedule.objects.create(name="s", task="test.echo", cron="0 * * * *", payload={"a": 1})
    tick = dt.datetime(2026, 4, 1, 10, tzinfo=dt.UTC)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=tick)
    response = admin_client.post(f"{LIST}{schedule.pk}/run/")
    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.task, job.payload, job.dedupe_key.startswith("schedule:s:now:")) == (
        "test.echo",
        {"a": 1},
        True,
    )
    assert Schedule.objects.get().next_run_at == tick
    assert LogEntry.objects.get().change_message == f"Run now: job {job.id}"


def test_run_now_is_403_without_the_run_schedule_permission(staff):
    schedule = Schedule.objects.create(name="s", task="test.noop", cron="0 * * * *")
    viewer = staff("view_schedule", "change_schedule")
    assert viewer.post(f"{LIST}{schedule.pk}/run/").status_code == 403
    assert "Run now" not in viewer.get(LIST).content.decode()
    assert not Job.objects.exists()
    assert staff("view_schedule", "run_schedule").post(f"{LIST}{schedule.pk}/run/").status_code == 302
    assert Job.objects.count() == 1


def test_a_settings_schedules_page_is_a_view_with_its_next_run_in_its_zone_and_utc(admin_client):
    """JOBQ["SCHEDULES"] owns it: no Save buttons over read-only fields, and a change posted anyway is
    refused; its next run reads as in the list, in its zone and in UTC."""
    theirs = Schedule.objects.create(
        name="theirs", task="test.noop", at="09:30", timezone="Europe/Berlin", source=ScheduleSource.SETTINGS
    )
    Schedule.objects.filter(pk=theirs.pk).update(next_run_at=dt.datetime(2026, 4, 2, 7, 30, tzinfo=dt.UTC))
    page = admin_client.get(f"{LIST}{theirs.pk}/change/").content.decode()
    assert 'name="_save"' not in page and 'name="_continue"' not in page and "Close" in page
    assert "2026-04-02 09:30 CEST" in page and "(Europe/Berlin)" in page and "2026-04-02 07:30 UTC" in page
    assert (
        admin_client.post(f"{LIST}{theirs.pk}/change/", {"name": "theirs", "at": "10:00"}).status_code == 403
    )
    assert Schedule.objects.get(pk=theirs.pk).at == "09:30"

    mine = Schedule.objects.create(name="mine", task="test.noop", cron="0 * * * *")
    page = admin_client.get(f"{LIST}{mine.pk}/change/").content.decode()
    assert 'name="_save"' in page  # one made here is edited here
    assert "Next run:" in page and "Last tick:" in page
