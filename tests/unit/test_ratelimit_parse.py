"""Rate strings parse to (count, seconds) or are refused; rate-limit arguments are checked when the
limiter is built, before any connection is opened."""

import datetime as dt
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_jobq import ConfigurationError, InvalidJob
from django_jobq.ratelimit import MAX_WINDOW_LIMIT, SlidingWindow, TokenBucket, parse_rate
from django_jobq.validation import MAX_SECONDS

pytestmark = [pytest.mark.unit, pytest.mark.p0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10/s", (10, 1.0)),
        ("100/m", (100, 60.0)),
        ("5/h", (5, 3600.0)),
        ("1000/d", (1000, 86400.0)),
        ("3/10s", (3, 10.0)),
        ("1/1.5m", (1, 90.0)),
        ("1/0.5s", (1, 0.5)),
        ("7/2d", (7, 172800.0)),
        ("1000000000/s", (1_000_000_000, 1.0)),
    ],
)
def test_rate_strings_parse_to_count_and_seconds(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "10",
        "10/",
        "/s",
        "10/x",
        "10/S",  # units are lower case
        "10 / s",
        " 10/s",
        "10/s ",
        "10/sec",
        "10/1s/2",
        "-1/s",
        "+1/s",
        "0/s",
        "10/0s",
        "10/0.0001s",  # shorter than a millisecond
        "1/4000d",  # longer than ten years
        "1000000001/s",
        "1e3/s",
        "1.5/s",
        "10/.5s",
        "\uff11\uff10/s",  # full-width digits
        "٣/s",  # Arabic-Indic digit
        "10/s\x00",
        "10/\ud800s",
        "9" * 5000 + "/s",
        "10/m; DROP TABLE jobq_job",
        None,
        10,
        b"10/s",
        ("10", "s"),
    ],
)
def test_bad_rate_strings_are_refused_with_a_clear_error(text):
    with pytest.raises(InvalidJob, match="rate"):
        parse_rate(text)


@given(st.integers(1, 10**9), st.integers(1, 3650), st.sampled_from(["s", "m", "h", "d"]))
def test_parse_rate_round_trips_its_parts(count, number, unit):
    seconds = number * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    if seconds > MAX_SECONDS:
        with pytest.raises(InvalidJob):
            parse_rate(f"{count}/{number}{unit}")
    else:
        assert parse_rate(f"{count}/{number}{unit}") == (count, float(seconds))


BAD_KEYS = ["", None, 5, b"key", "a\x00b", "\udcff", "k" * 501]
BAD_COUNTS = [0, -1, True, 1.5, "10", None, 10**9 + 1, math.inf]
BAD_SECONDS = [0, -1, math.nan, math.inf, -math.inf, "1", None, True, 0.0001, MAX_SECONDS + 1]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_refused(key):
    with pytest.raises(InvalidJob, match="key"):
        TokenBucket(key, 1, 1, 1)
    with pytest.raises(InvalidJob, match="key"):
        SlidingWindow(key, 1, 1)


@pytest.mark.parametrize("value", BAD_COUNTS)
def test_bad_rates_bursts_and_limits_are_refused(value):
    with pytest.raises(InvalidJob, match="rate"):
        TokenBucket("k", value, 1, 1)
    with pytest.raises(InvalidJob, match="burst"):
        TokenBucket("k", 1, 1, value)
    with pytest.raises(InvalidJob, match="limit"):
        SlidingWindow("k", value, 1)


def test_a_window_limit_is_bounded_by_the_size_of_its_log():
    assert SlidingWindow("k", MAX_WINDOW_LIMIT, 1).limit == MAX_WINDOW_LIMIT
    with pytest.raises(InvalidJob, match="limit"):
        SlidingWindow("k", MAX_WINDOW_LIMIT + 1, 1)


@pytest.mark.parametrize("value", BAD_SECONDS)
def test_bad_periods_and_windows_are_refused(value):
    with pytest.raises(InvalidJob, match="per"):
        TokenBucket("k", 1, value, 1)
    with pytest.raises(InvalidJob, match="window"):
        SlidingWindow("k", 1, value)


def test_a_bucket_that_would_take_longer_than_ten_years_to_refill_is_refused():
    assert TokenBucket("k", 1, 3600, 87_000).burst == 87_000  # about ten years
    with pytest.raises(InvalidJob, match="refill"):
        TokenBucket("k", 1, 3600, 88_000)


def test_periods_may_be_timedeltas():
    assert TokenBucket("k", 1, dt.timedelta(minutes=1), 1).per == 60.0
    assert SlidingWindow("k", 1, dt.timedelta(milliseconds=1)).window == 0.001


@pytest.mark.parametrize("value", [None, 0, 1, "yes"])
def test_fail_open_must_be_a_bool(value):
    with pytest.raises(InvalidJob, match="fail_open"):
        TokenBucket("k", 1, 1, 1, fail_open=value)


@pytest.mark.parametrize("alias", ["nope", "", 0, "default\x00"])
def test_an_unknown_database_alias_is_a_configuration_error(alias):
    with pytest.raises(ConfigurationError, match="DATABASES"):
        SlidingWindow("k", 1, 1, using=alias)
