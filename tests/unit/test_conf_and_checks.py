"""Settings parsing and system checks (no database server needed)."""

import pytest
from django.core.checks import run_checks

from django_jobq.conf import JobqSettings, jobq_settings
from django_jobq.exceptions import ConfigurationError

pytestmark = [pytest.mark.unit, pytest.mark.p1]


def test_defaults():
    conf = JobqSettings.from_dict({})
    assert conf.clock == "database" and conf.lease_seconds > conf.heartbeat_seconds


def test_upper_case_keys_map_to_fields():
    conf = JobqSettings.from_dict({"LEASE_SECONDS": 90, "PERMANENT_EXCEPTIONS": ["x.Y"]})
    assert conf.lease_seconds == 90 and conf.permanent_exceptions == ("x.Y",)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"LEASE": 5}, "Unknown JOBQ setting"),
        ({"CLOCK": "wall"}, "CLOCK"),
        ({"LEASE_SECONDS": 0}, "LEASE_SECONDS"),
        ({"POLL_INTERVAL": "1"}, "POLL_INTERVAL"),
        ({"NOTIFY_CHANNEL": ""}, "NOTIFY_CHANNEL"),
        ({"NOTIFY_CHANNEL": "x" * 64}, "NOTIFY_CHANNEL"),
        ({"NOTIFY_CHANNEL": "a\x00b"}, "NOTIFY_CHANNEL"),
        ({"LOCK_TIMEOUT": 60, "STATEMENT_TIMEOUT": 30}, "LOCK_TIMEOUT"),
        ({"FREE_RELEASES": -1}, "FREE_RELEASES"),
        ({"ERROR_HISTORY": 0}, "ERROR_HISTORY"),
    ],
)
def test_invalid_settings_are_refused(raw, message):
    with pytest.raises(ConfigurationError, match=message):
        JobqSettings.from_dict(raw)


def test_settings_are_cached_and_reset_when_changed(settings):
    first = jobq_settings()
    assert jobq_settings() is first
    settings.JOBQ = {"LEASE_SECONDS": 123}
    assert jobq_settings().lease_seconds == 123


def _ids(settings_obj, jobq):
    settings_obj.JOBQ = jobq
    return sorted(m.id for m in run_checks() if m.id and m.id.startswith("jobq."))


def test_check_ids(settings):
    assert _ids(settings, {}) == []
    assert _ids(settings, {"CLOCK": "wall"}) == ["jobq.E001"]
    assert _ids(settings, {"DATABASE": "nope"}) == ["jobq.E002"]
    assert _ids(settings, {"LEASE_SECONDS": 5, "HEARTBEAT_SECONDS": 10}) == ["jobq.E004"]
    assert _ids(settings, {"QUEUES": {"emails": {"MAX_RUNNING": 0}}}) == ["jobq.E005"]


@pytest.mark.parametrize("setting", ["DISCARD_ON", "PERMANENT_EXCEPTIONS"])
@pytest.mark.parametrize(
    "path", ["no.such.module.Error", "django.core.exceptions.NoSuchError", "django.db.models.Model", "json"]
)
def test_an_exception_path_that_names_no_exception_class_is_a_check_error(settings, setting, path):
    assert _ids(settings, {setting: ["django.core.exceptions.ObjectDoesNotExist", path]}) == ["jobq.E011"]


@pytest.mark.parametrize(
    "path", ["no.such.module.mw", "tests.testapp.middleware.missing", "tests.testapp.middleware.NOT_CALLABLE"]
)
def test_a_middleware_path_that_names_no_callable_is_a_check_error(settings, path):
    assert _ids(settings, {"MIDDLEWARE": ["tests.testapp.middleware.outer", path]}) == ["jobq.E012"]
    assert _ids(settings, {"MIDDLEWARE": ["tests.testapp.middleware.outer"]}) == []


@pytest.mark.parametrize(
    ("jobq", "message"),
    [
        ({"MIDDLEWARE": "tests.testapp.middleware.outer"}, "list of dotted paths"),
        ({"DISCARD_ON": "django.core.exceptions.ObjectDoesNotExist"}, "list of dotted paths"),
        ({"MAX_SNOOZES": -1}, "MAX_SNOOZES"),
        ({"MAX_SNOOZES": True}, "MAX_SNOOZES"),
        ({"CANCELLED_RETENTION_SECONDS": -5}, "CANCELLED_RETENTION_SECONDS"),
        ({"CANCELLED_RETENTION_SECONDS": float("nan")}, "CANCELLED_RETENTION_SECONDS"),
    ],
)
def test_bad_job_control_settings_are_refused(settings, jobq, message):
    settings.JOBQ = jobq
    with pytest.raises(ConfigurationError, match=message):
        jobq_settings()


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ([], "must be a dict"),
        ({"emails": 4}, "must be a dict of"),
        ({"emails": {"MAX_RUNING": 4}}, "unknown option"),
        ({"emails": {"MAX_RUNNING": 0}}, "MAX_RUNNING"),
        ({"emails": {"MAX_RUNNING": True}}, "MAX_RUNNING"),
        ({"emails": {"MAX_RUNNING": "4"}}, "MAX_RUNNING"),
        ({"*": {"MAX_RUNNING": 4}}, "queue name"),
        ({"": {}}, "queue name"),
        ({" emails": {}}, "queue name"),
    ],
)
def test_bad_queue_options_are_refused(settings, queues, message):
    settings.JOBQ = {"QUEUES": queues}
    with pytest.raises(ConfigurationError, match=message):
        jobq_settings()


def test_queue_options_parse(settings):
    settings.JOBQ = {"QUEUES": {"emails": {"MAX_RUNNING": 4}, "bulk": {}}}
    conf = jobq_settings()
    assert conf.queues["emails"].max_running == 4 and conf.caps() == {"emails": 4}


def test_check_refuses_a_database_without_an_engine(settings, monkeypatch):
    from django.db import connections

    monkeypatch.setattr(connections["default"], "vendor", "mysql")
    assert _ids(settings, {}) == ["jobq.E003"]


def test_check_names_each_feature_the_sqlite_engine_lacks(settings, monkeypatch):
    from django.db import connections

    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    ids = _ids(settings, {"QUEUES": {"emails": {"MAX_RUNNING": 2}, "tenants": {"FAIR": True}}})
    # MAX_RUNNING (FAIR is not refused: SQLite has fair queues), and each feature of the test app's capped and rate-limited tasks; DEFERRED
    # transactions warned about
    from django_jobq.registry import registered_tasks

    needs = [t for t in registered_tasks().values() if t.max_running or t.max_running_per_key]
    needs += [t for t in registered_tasks().values() if t.rate_limit]
    assert len(needs) >= 3
    assert ids.count("jobq.E009") == 1 + len(needs) and "jobq.W001" in ids
