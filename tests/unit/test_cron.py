"""django_jobq.cron.next_run: the DST rules of docs/scheduling.md, zone by zone, and bad input.

Transition nights used (tzdata rules for 2026):
  Europe/Berlin       Mar 29 02:00 CET -> 03:00 CEST (01:00Z); Oct 25 03:00 CEST -> 02:00 CET (01:00Z)
  America/New_York    Mar 8 02:00 EST -> 03:00 EDT (07:00Z);   Nov 1 02:00 EDT -> 01:00 EST (06:00Z)
  Australia/Lord_Howe Apr 5 02:00 +11 -> 01:30 +1030 (15:00Z Apr 4); Oct 4 02:00 +1030 -> 02:30 +11 (15:30Z Oct 3)
  America/Santiago    Apr 5 00:00 -03 -> Apr 4 23:00 -04 (03:00Z); Sep 6 00:00 -04 -> 01:00 -03 (04:00Z)
  America/Havana      Mar 8 00:00 -05 -> 01:00 -04 (05:00Z); Nov 1 01:00 -04 -> 00:00 -05 (05:00Z)
  Asia/Beirut         Mar 29 00:00 +02 -> 01:00 +03 (22:00Z Mar 28); Oct 25 00:00 +03 -> Oct 24 23:00 +02 (21:00Z)
  Antarctica/Troll    Mar 29 01:00 +00 -> 03:00 +02 (01:00Z); Oct 25 03:00 +02 -> 01:00 +00 (01:00Z)
"""

import datetime as dt
import functools
import time
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_jobq.cron import MAX_SPEC_LENGTH, next_run, parse_spec, validate_spec, validate_timezone
from django_jobq.exceptions import InvalidJob

pytestmark = [pytest.mark.unit, pytest.mark.p0]

UTC = dt.UTC


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def runs(spec: str, tz: str, start: str, end: str) -> list[str]:
    """Every run in (start, end], found by iterating next_run, as 'MM-DDTHH:MM' UTC strings."""
    found, instant, stop = [], utc(start), utc(end)
    while (instant := next_run(spec, instant, tz)) <= stop:
        found.append(instant.strftime("%m-%dT%H:%M"))
    return found


# The cases the scheduler must get right: every run in (start, end] of 2026 around each transition,
# as UTC "MM-DDTHH:MM" instants; none lost, none doubled.
TRANSITION_RUNS = """
# Berlin, spring forward: 02:30 does not exist on Mar 29 and runs at 03:00 CEST instead.
Europe/Berlin       | 02:30          | 03-27 12:00 .. 03-30 12:00 | 03-28T01:30 03-29T01:00 03-30T00:30
Europe/Berlin       | 01:30          | 03-27 12:00 .. 03-30 12:00 | 03-28T00:30 03-29T00:30 03-29T23:30
Europe/Berlin       | 0 * * * *      | 03-28 22:30 .. 03-29 02:30 | 03-28T23:00 03-29T00:00 03-29T01:00 03-29T02:00
Europe/Berlin       | */15 * * * *   | 03-29 00:20 .. 03-29 01:20 | 03-29T00:30 03-29T00:45 03-29T01:00 03-29T01:15
Europe/Berlin       | 30 2 * * 0     | 03-20 00:00 .. 04-06 00:00 | 03-22T01:30 03-29T01:00 04-05T00:30
# Berlin, fall back: 02:00-02:59 twice; a daily 02:30 runs in the first pass only.
Europe/Berlin       | 02:30          | 10-23 12:00 .. 10-26 12:00 | 10-24T00:30 10-25T00:30 10-26T01:30
Europe/Berlin       | 01:30          | 10-23 12:00 .. 10-26 12:00 | 10-23T23:30 10-24T23:30 10-26T00:30
Europe/Berlin       | 0 * * * *      | 10-24 22:30 .. 10-25 02:30 | 10-24T23:00 10-25T00:00 10-25T01:00 10-25T02:00
Europe/Berlin       | */15 * * * *   | 10-25 00:20 .. 10-25 01:20 | 10-25T00:30 10-25T00:45 10-25T01:00 10-25T01:15
Europe/Berlin       | 30 2 * * 0     | 10-20 00:00 .. 11-02 00:00 | 10-25T00:30 11-01T01:30
# New York, spring forward at 02:00 local.
America/New_York    | 02:30          | 03-06 12:00 .. 03-09 12:00 | 03-07T07:30 03-08T07:00 03-09T06:30
America/New_York    | 01:30          | 03-06 12:00 .. 03-09 12:00 | 03-07T06:30 03-08T06:30 03-09T05:30
America/New_York    | 0 * * * *      | 03-08 04:30 .. 03-08 08:30 | 03-08T05:00 03-08T06:00 03-08T07:00 03-08T08:00
America/New_York    | */15 * * * *   | 03-08 06:20 .. 03-08 07:20 | 03-08T06:30 03-08T06:45 03-08T07:00 03-08T07:15
America/New_York    | 30 2 * * 0     | 03-01 00:00 .. 03-16 00:00 | 03-01T07:30 03-08T07:00 03-15T06:30
# New York, fall back: 01:00-01:59 twice; 02:30 is not ambiguous.
America/New_York    | 02:30          | 10-30 12:00 .. 11-02 12:00 | 10-31T06:30 11-01T07:30 11-02T07:30
America/New_York    | 01:30          | 10-30 12:00 .. 11-02 12:00 | 10-31T05:30 11-01T05:30 11-02T06:30
America/New_York    | 0 * * * *      | 11-01 03:30 .. 11-01 07:30 | 11-01T04:00 11-01T05:00 11-01T06:00 11-01T07:00
America/New_York    | */15 * * * *   | 11-01 05:20 .. 11-01 06:20 | 11-01T05:30 11-01T05:45 11-01T06:00 11-01T06:15
America/New_York    | 30 2 * * 0     | 10-25 00:00 .. 11-09 00:00 | 10-25T06:30 11-01T07:30 11-08T07:30
# Lord Howe: a 30-minute shift. 02:15 is skipped in spring (runs at 02:30 +11), 01:45 repeats in autumn.
Australia/Lord_Howe | 02:15          | 10-02 12:00 .. 10-04 16:00 | 10-02T15:45 10-03T15:30 10-04T15:15
Australia/Lord_Howe | 01:45          | 04-03 12:00 .. 04-05 16:00 | 04-03T14:45 04-04T14:45 04-05T15:15
Australia/Lord_Howe | */30 * * * *   | 04-04 14:00 .. 04-04 15:30 | 04-04T14:30 04-04T15:00 04-04T15:30
Australia/Lord_Howe | 0 * * * *      | 10-03 14:00 .. 10-03 16:30 | 10-03T14:30 10-03T16:00
# DST at midnight: Santiago and Beirut skip 00:00-00:59 in spring and repeat 23:00-23:59 in autumn.
America/Santiago    | 00:00          | 09-04 12:00 .. 09-07 12:00 | 09-05T04:00 09-06T04:00 09-07T03:00
America/Santiago    | 23:30          | 04-03 12:00 .. 04-06 12:00 | 04-04T02:30 04-05T02:30 04-06T03:30
America/Santiago    | 0 * * * *      | 04-05 01:30 .. 04-05 04:30 | 04-05T02:00 04-05T03:00 04-05T04:00
Asia/Beirut         | 00:30          | 03-27 12:00 .. 03-30 12:00 | 03-27T22:30 03-28T22:00 03-29T21:30
Asia/Beirut         | 23:30          | 10-23 12:00 .. 10-25 23:00 | 10-23T20:30 10-24T20:30 10-25T21:30
America/Havana      | 00:30          | 03-06 12:00 .. 03-09 12:00 | 03-07T05:30 03-08T05:00 03-09T04:30
America/Havana      | 00:30          | 10-30 12:00 .. 11-02 12:00 | 10-31T04:30 11-01T04:30 11-02T05:30
# Troll: a two-hour shift; 01:30 falls in the gap, and in autumn 01:00-02:59 repeats.
Antarctica/Troll    | 01:30          | 03-27 12:00 .. 03-30 12:00 | 03-28T01:30 03-29T01:00 03-29T23:30
Antarctica/Troll    | */30 * * * *   | 10-25 00:10 .. 10-25 01:40 | 10-25T00:30 10-25T01:00 10-25T01:30
# Several listed hours in one gap collapse into one run, never two at one instant.
Europe/Berlin       | 0,30 2,3 * * * | 03-29 00:00 .. 03-29 02:00 | 03-29T01:00 03-29T01:30
Europe/Berlin       | 0 */2 * * *    | 03-28 22:30 .. 03-29 02:30 | 03-28T23:00 03-29T01:00 03-29T02:00
Europe/Berlin       | 0 */2 * * *    | 10-24 21:30 .. 10-25 03:30 | 10-24T22:00 10-25T00:00 10-25T03:00
"""


def transition_cases():
    for line in TRANSITION_RUNS.strip().splitlines():
        if not line.startswith("#"):
            tz, spec, window, expected = (part.strip() for part in line.split("|"))
            start, end = (f"2026-{edge}" for edge in window.split(" .. "))
            yield pytest.param(tz, spec, start, end, expected.split(), id=f"{tz} {spec} {start}")


@pytest.mark.parametrize(("tz", "spec", "start", "end", "expected"), list(transition_cases()))
def test_runs_around_transitions(tz, spec, start, end, expected):
    assert runs(spec, tz, start, end) == expected


# `after` inside Berlin's repeated hour (Oct 25 2026), in either pass: the first pass's run is not
# repeated and the next tick is not skipped.
@pytest.mark.parametrize(
    ("spec", "first_pass", "second_pass"),
    [
        ("02:30", "2026-10-25 00:30", "2026-10-26 01:30"),
        ("*/30 2 * * *", "2026-10-25 00:30", "2026-10-26 01:00"),
        ("0 * * * *", "2026-10-25 01:00", "2026-10-25 02:00"),
        ("*/15 * * * *", "2026-10-25 00:30", "2026-10-25 01:30"),
        ("10,50 * * * *", "2026-10-25 00:50", "2026-10-25 01:50"),
    ],
)
def test_after_inside_the_repeated_hour(spec, first_pass, second_pass):
    berlin = ZoneInfo("Europe/Berlin")
    for fold, expected in ((0, first_pass), (1, second_pass)):
        after = dt.datetime(2026, 10, 25, 2, 20, tzinfo=berlin, fold=fold)
        assert next_run(spec, after, "Europe/Berlin") == utc(expected)
        assert next_run(spec, after.astimezone(UTC), "Europe/Berlin") == utc(expected)


def test_every_hour_spec_repeats_the_hour_on_the_first_pass_s_later_wall_times():
    # From 02:40 CEST (first pass) the next hourly tick is 02:00 CET, an earlier wall time.
    after = dt.datetime(2026, 10, 25, 2, 40, tzinfo=ZoneInfo("Europe/Berlin"), fold=0)
    assert next_run("0 * * * *", after, "Europe/Berlin") == utc("2026-10-25 01:00")


@pytest.mark.parametrize(
    ("tz", "daily", "year", "gap_days"),
    [
        ("Europe/Berlin", "02:30", 2026, 1),
        ("America/New_York", "01:30", 2026, 0),
        ("Australia/Lord_Howe", "02:15", 2026, 1),
        ("America/Santiago", "00:00", 2026, 1),
        ("Asia/Beirut", "00:30", 2028, 1),
        ("America/Havana", "00:30", 2028, 1),
        ("Antarctica/Troll", "01:30", 2028, 1),
        ("UTC", "12:00", 2028, 0),
    ],
)
def test_a_year_of_daily_runs_has_one_per_day_at_its_wall_time(tz, daily, year, gap_days):
    """One run per local date, at the wall time, or at the gap's end on the day that skips it."""
    zone = ZoneInfo(tz)
    hour, minute = map(int, daily.split(":"))
    instant = dt.datetime(year, 1, 1, tzinfo=zone) - dt.timedelta(microseconds=1)
    end = dt.datetime(year + 1, 1, 1, tzinfo=zone)
    dates, substitutes = [], 0
    while (instant := next_run(daily, instant, tz)) < end:
        local = instant.astimezone(zone)
        dates.append(local.date())
        assert local.fold == 0
        if (local.hour, local.minute) != (hour, minute):
            substitutes += 1
            wanted = local.replace(hour=hour, minute=minute, tzinfo=None)
            assert wanted.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wanted
            assert (instant - dt.timedelta(seconds=1)).astimezone(zone).utcoffset() != local.utcoffset()
    days = 366 if year % 4 == 0 else 365
    assert len(dates) == days and len(set(dates)) == days
    assert substitutes == gap_days


def test_an_hourly_spec_runs_every_real_hour_for_a_year():
    instant, end, count = utc("2025-12-31 23:00"), utc("2026-12-31 23:00"), 0
    while (following := next_run("0 * * * *", instant, "Europe/Berlin")) <= end:
        assert following - instant == dt.timedelta(hours=1)
        instant, count = following, count + 1
    assert count == 365 * 24


def test_the_server_time_zone_changes_nothing(monkeypatch):
    after = utc("2026-03-29 00:45")
    expected = next_run("02:30", after, "Europe/Berlin")
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")
    time.tzset()
    try:
        assert next_run("02:30", after, "Europe/Berlin") == expected == utc("2026-03-29 01:00")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_result_is_aware_utc_and_strictly_after():
    after = utc("2026-05-01 09:30")
    result = next_run("09:30", after.astimezone(ZoneInfo("Asia/Tokyo")), "UTC")
    assert result == utc("2026-05-02 09:30") and result.tzinfo is UTC


@pytest.mark.parametrize(
    ("spec", "normal"),
    [
        ("9:07", "09:07"),
        (" 09:07\t", "09:07"),
        ("0:00", "00:00"),
        ("23:59", "23:59"),
        ("0  9 * * mon-fri", "0 9 * * MON-FRI"),
        ("\t*/15 * * * *", "*/15 * * * *"),
        ("0 0 L * *", "0 0 L * *"),
        ("0 0 * * 5L", "0 0 * * 5L"),
        ("0 0 * * 1#2", "0 0 * * 1#2"),
    ],
)
def test_accepted_specs_are_normalised(spec, normal):
    assert validate_spec(spec) == normal


def test_every_hour_is_decided_by_the_hour_field():
    assert parse_spec("*/15 * * * *").every_hour and parse_spec("30 0-23 * * 1").every_hour
    assert not parse_spec("0 */2 * * *").every_hour and not parse_spec("* 2 * * *").every_hour


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (123, "must be a str"),
        (None, "must be a str"),
        (b"0 0 * * *", "must be a str"),
        (["0", "0", "*", "*", "*"], "must be a str"),
        ("", "has 0 fields"),
        ("   ", "has 0 fields"),
        ("0 0 * *", "has 4 fields"),
        ("0 0 * * * *", "has 6 fields"),
        ("0 0 1 1 * 2027", "has 6 fields"),
        ("@daily", "has 1 field;"),
        ("60 * * * *", "bad minute"),
        ("* 24 * * *", "bad hour"),
        ("0 0 32 * *", "bad day-of-month"),
        ("0 0 * 13 *", "bad month"),
        ("0 0 * * 8", "bad day-of-week"),
        ("*/0 * * * *", "bad minute"),
        ("5-1 * * * *", "bad minute"),
        ("0 0 ? * *", "unexpected character"),
        ("H * * * *", "bad minute"),
        ("0 0 30 2 *", "bad day-of-month"),
        ("* * */20 * 1L", "never fires"),
        ("0;0 * * * *", "unexpected character"),
        ("0 0 * * *; DROP TABLE jobq_job", "fields"),
        ("0 0 * * *\x00", "NUL"),
        ("0\x00 0 * * *", "NUL"),
        ("0 0 * * *\ud800", "ASCII"),
        ("\u0660 0 * * *", "ASCII"),
        ("x" * (MAX_SPEC_LENGTH + 1), "longer than"),
        ("0 0 * * *" + " " * MAX_SPEC_LENGTH, "longer than"),
        ("24:00", "HH:MM"),
        ("9:7", "HH:MM"),
        ("09:60", "HH:MM"),
        ("-1:00", "HH:MM"),
        ("+9:00", "HH:MM"),
        ("9:07:00", "HH:MM"),
        ("09 :30", "HH:MM"),
        ("009:30", "HH:MM"),
        ("\u0660\u0669:\u0663\u0660", "ASCII"),
    ],
)
def test_bad_specs_are_refused(spec, message):
    with pytest.raises(InvalidJob, match=message):
        validate_spec(spec)
    with pytest.raises(InvalidJob, match=message):
        next_run(spec, utc("2026-01-01 00:00"), "UTC")


@pytest.mark.parametrize(
    ("tz", "message"),
    [
        (None, "IANA name"),
        (1, "IANA name"),
        (ZoneInfo("UTC"), "IANA name"),
        ("", "must not be empty"),
        ("Mars/Olympus_Mons", "unknown time zone"),
        ("europe/berlin", "did you mean 'Europe/Berlin'"),
        ("Europe/Berlin\x00", "not an IANA name"),
        ("Europe/Berlin ", "not an IANA name"),
        ("../etc/passwd", "not an IANA name"),
        ("/etc/localtime", "not an IANA name"),
        ("Europe/../Europe/Berlin", "not an IANA name"),
        ("localtime", "unknown time zone"),
        ("Factory", "unknown time zone"),
        ("posixrules", "unknown time zone"),
        ("right/Europe/Berlin", "unknown time zone"),
        ("posix/Europe/Berlin", "unknown time zone"),
        ("Europe/Berlin'; DROP TABLE jobq_job; --", "not an IANA name"),
        ("Europe/Berlin\ud800", "not an IANA name"),
        ("A/" * 1000, "not an IANA name"),
    ],
)
def test_bad_time_zones_are_refused(tz, message):
    with pytest.raises(InvalidJob, match=message):
        validate_timezone(tz)
    with pytest.raises(InvalidJob, match=message):
        next_run("02:30", utc("2026-01-01 00:00"), tz)


@pytest.mark.parametrize(
    "tz", ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "US/Eastern"]
)
def test_iana_names_are_accepted(tz):
    assert validate_timezone(tz) == tz


@pytest.mark.parametrize(
    ("after", "message"),
    [
        (dt.datetime(2026, 1, 1), "aware"),
        (dt.date(2026, 1, 1), "must be a datetime"),
        ("2026-01-01T00:00:00Z", "must be a datetime"),
        (1767225600, "must be a datetime"),
        (None, "must be a datetime"),
        (dt.datetime.max.replace(tzinfo=UTC), "no run after"),
        (dt.datetime.max.replace(tzinfo=dt.timezone(-dt.timedelta(hours=5))), "out of range"),
    ],
)
def test_bad_after_is_refused(after, message):
    with pytest.raises(InvalidJob, match=message):
        next_run("02:30", after, "Europe/Berlin")


# --- Property: next_run against a brute-force oracle that walks every UTC minute ------------------

PROPERTY_ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Havana",
    "Asia/Beirut",
    "Antarctica/Troll",
    "Africa/Casablanca",
    "Pacific/Chatham",
    "America/St_Johns",
    "Australia/Adelaide",
    "Asia/Kolkata",
    "UTC",
]
MINUTE = dt.timedelta(minutes=1)


@functools.cache
def transitions(tz: str) -> tuple[dt.datetime, ...]:
    """The zone's offset changes in 2020-2035, to the second."""
    zone, step = ZoneInfo(tz), dt.timedelta(hours=6)
    found, instant = [], utc("2020-01-01 00:00")
    while instant < utc("2036-01-01 00:00"):
        lo, hi = instant, instant + step
        if lo.astimezone(zone).utcoffset() != hi.astimezone(zone).utcoffset():
            while hi - lo > dt.timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                lo, hi = (
                    (mid, hi)
                    if mid.astimezone(zone).utcoffset() == lo.astimezone(zone).utcoffset()
                    else (lo, mid)
                )
            found.append(hi)
        instant += step
    return tuple(found)


@functools.cache
def matcher(spec: str):
    """Whether a naive wall time matches ``spec``, and whether the spec fires in every hour, from the
    field sets cronsim parsed (the safe specs below leave day-of-month at "*": every field must match)."""
    fields = CronSim(parse_spec(spec).expr, dt.datetime(2000, 1, 1))

    def matches(wall: dt.datetime) -> bool:
        weekday = wall.isoweekday() % 7
        return (
            wall.minute in fields.minutes
            and wall.hour in fields.hours
            and wall.month in fields.months
            and (weekday in fields.weekdays or (weekday == 0 and 7 in fields.weekdays))
        )

    return matches, fields.hours == set(range(24))


def oracle_runs(spec: str, tz: str, after: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
    """Every run in (after, until] by the documented rules, checking each UTC minute: a matching
    wall time runs if it is its first occurrence (either occurrence for every-hour specs), and the
    minute a gap ends runs if a matching wall time lies inside the gap (not for every-hour specs)."""
    zone, (matches, every_hour) = ZoneInfo(tz), matcher(spec)
    instant = after.replace(second=0, microsecond=0) + MINUTE
    found = []
    while instant <= until:
        local, previous = instant.astimezone(zone), (instant - MINUTE).astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        run = matches(wall) and (every_hour or local.fold == 0)
        if not every_hour and local.utcoffset() > previous.utcoffset():  # a gap ends at this minute
            skipped = previous.replace(tzinfo=None, fold=0) + MINUTE
            while skipped < wall and not run:
                run, skipped = matches(skipped), skipped + MINUTE
        if run:
            found.append(instant)
        instant += MINUTE
    return found


SAFE_SPECS = st.one_of(
    st.builds(lambda h, m: f"{h}:{m:02d}", st.integers(0, 23), st.integers(0, 59)),
    st.builds(
        lambda m, h, w: f"{m} {h} * * {w}",
        st.sampled_from(["*", "*/5", "*/15", "0", "30", "0,30", "15,45", "7", "59"]),
        st.one_of(
            st.just("*"), st.sampled_from(["*/2", "*/3", "0", "1", "2", "3", "23", "0-3", "1,2", "22-23"])
        ),
        st.sampled_from(["*", "0", "1-5", "6", "SUN", "MON-FRI"]),
    ),
)


@st.composite
def instants(draw, tz: str) -> dt.datetime:
    """An instant in 2020-2035, half of the time within three hours of one of the zone's transitions."""
    if transitions(tz) and draw(st.booleans()):
        base = draw(st.sampled_from(transitions(tz)))
        return base + dt.timedelta(seconds=draw(st.integers(-3 * 3600, 3 * 3600)))
    moment = draw(st.datetimes(min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2035, 12, 31)))
    return moment.replace(tzinfo=UTC)


@st.composite
def cases(draw):
    tz = draw(st.sampled_from(PROPERTY_ZONES))
    return draw(SAFE_SPECS), tz, draw(instants(tz)), draw(st.booleans())


@settings(max_examples=200, deadline=None)
@given(cases())
@example(("*/15 * * * *", "Europe/Berlin", utc("2026-10-25 00:20"), False))  # first pass of a repeated hour
@example(("15 * * * *", "Australia/Lord_Howe", utc("2026-10-03 15:00"), True))  # a 30-minute gap
@example(("0 1 * * *", "Antarctica/Troll", utc("2026-03-29 00:30"), False))  # a two-hour gap
def test_next_run_is_the_first_run_the_rules_allow(case):
    spec, tz, after, in_local_time = case
    result = next_run(spec, after.astimezone(ZoneInfo(tz)) if in_local_time else after, tz)
    assert result > after and result.tzinfo is UTC
    assert result - after <= dt.timedelta(days=8)  # every safe spec fires at least weekly
    assert oracle_runs(spec, tz, after, result) == [result]
