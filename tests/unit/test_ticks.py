"""The scheduler's pure rules: missed-tick policies, the ticks a pass publishes, the zone chain, tick
keys, and JOBQ["SCHEDULES"] parsing (no database server needed)."""

import datetime as dt

import pytest

from django_jobq import ticks
from django_jobq.conf import JobqSettings
from django_jobq.exceptions import ConfigurationError, InvalidJob

pytestmark = [pytest.mark.unit, pytest.mark.p1]

UTC = dt.UTC
GRACE = dt.timedelta(seconds=60)


def at(hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime(2026, 4, 1, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "keep"), [("skip", None), ("latest", 1), ("backfill:3", 3), ("backfill:1000", 1000)]
)
def test_missed_policies_parse(text, keep):
    assert ticks.parse_missed(text) == (text, keep)


@pytest.mark.parametrize(
    "bad", ["", "Skip", "backfill", "backfill:0", "backfill:1001", "backfill:-1", None, 3]
)
def test_bad_missed_policies_are_refused(bad):
    with pytest.raises(InvalidJob, match="'skip', 'latest' or 'backfill:N'"):
        ticks.parse_missed(bad)


@pytest.mark.parametrize(
    ("missed", "expected"),
    [
        ("skip", [at(13)]),  # only the on-time tick
        ("latest", [at(13)]),
        ("backfill:3", [at(11), at(12), at(13)]),
    ],
)
def test_due_ticks_after_an_outage_with_an_on_time_tick(missed, expected):
    found = ticks.due_ticks("0 * * * *", "UTC", at(10), at(13, 0, 20), ticks.parse_missed(missed), GRACE)
    assert found == expected


def test_due_ticks_of_a_late_pass_under_skip_are_none():
    assert ticks.due_ticks("0 * * * *", "UTC", at(10), at(12, 59), ticks.parse_missed("skip"), GRACE) == []


def test_a_long_outage_of_a_frequent_schedule_walks_back_only_as_far_as_needed():
    start = dt.datetime(2026, 1, 1, tzinfo=UTC)  # three months of minutes missed
    found = ticks.due_ticks("* * * * *", "UTC", start, at(12, 0, 30), ticks.parse_missed("backfill:5"), GRACE)
    assert found == [at(11, 56), at(11, 57), at(11, 58), at(11, 59), at(12, 0)]


def test_a_rare_schedule_missed_for_years_finds_its_latest_tick():
    start = dt.datetime(2020, 1, 1, tzinfo=UTC)
    found = ticks.due_ticks("0 0 1 1 *", "UTC", start, at(9), ticks.parse_missed("latest"), GRACE)
    assert found == [dt.datetime(2026, 1, 1, tzinfo=UTC)]


def test_nothing_is_due_before_the_next_run():
    assert ticks.due_ticks("0 * * * *", "UTC", at(11), at(10, 59), ticks.parse_missed("latest"), GRACE) == []


def test_the_zone_chain(settings):
    settings.TIME_ZONE = "Europe/Berlin"
    assert ticks.zone_for("Asia/Tokyo", "America/New_York") == "Asia/Tokyo"
    assert ticks.zone_for(None, "America/New_York") == "America/New_York"
    assert ticks.zone_for(None, None) == "Europe/Berlin"
    settings.TIME_ZONE = None
    assert ticks.zone_for(None, None) == "UTC"


def test_tick_keys_round_trip_and_other_keys_name_no_tick():
    key = ticks.tick_key("nightly", dt.datetime(2026, 3, 29, 3, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))))
    assert key == "schedule:nightly:2026-03-29T01:00:00Z"
    assert ticks.tick_of(key) == dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert ticks.tick_of(ticks.tick_key("nightly:now", at(9))) == at(9)
    for other in (None, "", "order:42", "schedule:x", "schedule:x:not-a-time-at-all-00"):
        assert ticks.tick_of(other) is None


@pytest.mark.parametrize("bad", ["", " x", "a b", "x" * 101, "naïve", "a\x00", "-x", 5])
def test_bad_schedule_names_are_refused(bad):
    with pytest.raises(InvalidJob, match="schedule name must be"):
        ticks.validate_name(bad)


def test_settings_schedules_parse_normalised():
    conf = JobqSettings.from_dict(
        {"TIMEZONE": "Europe/Berlin", "SCHEDULES": {
            "nightly": {"TASK": "app.tasks.x", "CRON": "30  2 * * sun", "MISSED": "backfill:2"},
            "morning": {"TASK": "app.tasks.y", "AT": "9:05", "TIMEZONE": "Asia/Tokyo", "PAYLOAD": {"a": 1},
                        "QUEUE": "reports", "PRIORITY": 10, "ENABLED": False},
        }}
    )  # fmt: skip
    nightly, morning = conf.schedules["nightly"], conf.schedules["morning"]
    assert (nightly.cron, nightly.at, nightly.missed, nightly.timezone) == (
        "30 2 * * SUN",
        None,
        "backfill:2",
        None,
    )
    assert (morning.at, morning.timezone, morning.queue, morning.priority, morning.enabled) == (
        "09:05",
        "Asia/Tokyo",
        "reports",
        10,
        False,
    )
    assert conf.timezone == "Europe/Berlin"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("30 2 * * *", "must be a dict"),
        ({"CRON": "30 2 * * *"}, "TASK must be a non-empty string"),
        ({"TASK": "t", "CRON": "30 2 * *"}, "has 4 fields"),
        ({"TASK": "t", "AT": "2:60"}, "must be 'HH:MM'"),
        ({"TASK": "t", "AT": "30 2 * * *"}, "must be 'HH:MM'"),
        ({"TASK": "t"}, "exactly one"),
        ({"TASK": "t", "AT": "02:00", "TIMEZONE": "localtime"}, "unknown time zone 'localtime'"),
        ({"TASK": "t", "AT": "02:00", "PAYLOAD": [1]}, "payload must be a JSON object"),
        ({"TASK": "t", "AT": "02:00", "PRIORITY": 10**6}, "priority must be an integer"),
        ({"TASK": "t", "AT": "02:00", "QUEUE": "*"}, "is not a queue name"),
        ({"TASK": "t", "AT": "02:00", "MISSED": "all"}, "'skip', 'latest' or 'backfill:N'"),
        ({"TASK": "t", "AT": "02:00", "ENABLED": "yes"}, '"ENABLED" must be True or False'),
    ],
)
def test_bad_settings_schedules_are_configuration_errors_naming_the_entry(entry, message):
    with pytest.raises(ConfigurationError) as caught:
        JobqSettings.from_dict({"SCHEDULES": {"nightly": entry}})
    assert str(caught.value).startswith("JOBQ[\"SCHEDULES\"]['nightly']: ") and message in str(caught.value)


def test_schedules_must_be_a_dict_and_the_default_zone_known():
    with pytest.raises(ConfigurationError, match=r'JOBQ\["SCHEDULES"\] must be a dict'):
        JobqSettings.from_dict({"SCHEDULES": ["nightly"]})
    with pytest.raises(ConfigurationError, match=r'JOBQ\["TIMEZONE"\]: unknown time zone'):
        JobqSettings.from_dict({"TIMEZONE": "Moon/Base"})
