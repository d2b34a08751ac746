"""Every value bound for the database is checked in Python first: what PostgreSQL would refuse is
refused here with a JobqError, and error texts are made storable instead of refused."""

import datetime as dt
import functools
import re

import pytest

from django_jobq import InvalidJob, InvalidPayload, JobqError
from django_jobq.validation import (
    MAX_JSON_DEPTH,
    MAX_SECONDS,
    dedupe_key,
    dump_json,
    error_text,
    name,
    seconds,
)

pytestmark = [pytest.mark.unit, pytest.mark.p0]


def nested(depth: int):
    return functools.reduce(lambda inner, _: [inner], range(depth), [])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"text": "a\x00b"}, "NUL"),
        ({"a\x00": 1}, "NUL"),
        (["\x00"], "NUL"),
        ({"text": "\ud800"}, "surrogate"),
        ({"\udfff": 1}, "surrogate"),
        (nested(MAX_JSON_DEPTH + 1), "nested more than"),
        (nested(100_000), "nested more than"),  # deeper than Python's own recursion limit
        ({"n": 10**5000}, "JSON"),  # an integer too long to print
        ({"x": float("inf")}, "JSON"),
    ],
)
def test_values_postgresql_cannot_store_are_refused(value, message):
    with pytest.raises(InvalidPayload, match=message) as caught:
        dump_json(value)
    assert isinstance(caught.value, JobqError)


def test_cyclic_values_are_refused_not_recursed_into():
    loop: list = []
    loop.append(loop)
    with pytest.raises(InvalidPayload):
        dump_json(loop)


@pytest.mark.parametrize(
    "text",
    ["a\\u0000b", "\\\\u0000", "é ü 漢字 🎉", "\\\\\\\\u0000"],  # escaped backslashes are not NULs
)
def test_storable_text_is_kept_exactly(text):
    assert dump_json({"t": text}) == '{"t":' + __import__("json").dumps(text, ensure_ascii=False) + "}"


def test_depth_up_to_the_limit_is_accepted():
    assert dump_json(nested(MAX_JSON_DEPTH - 1)).count("[") == MAX_JSON_DEPTH


@pytest.mark.parametrize(
    "value", ["a\x00b", "\ud800", "", " padded ", "x" * 201, 7, None, "'; DROP TABLE jobq_job; --" * 10]
)
def test_names_postgresql_cannot_store_or_that_are_malformed_are_refused(value):
    with pytest.raises(InvalidJob):
        name(value, "queue")


def test_injection_looking_names_are_plain_values():
    assert name("emails'; DROP TABLE jobq_job; --", "queue") == "emails'; DROP TABLE jobq_job; --"


@pytest.mark.parametrize("value", ["k\x00", "\udc80", "", "x" * 1001, "\U0001f600" * 600, 5])
def test_bad_dedupe_keys_are_refused(value):
    with pytest.raises(InvalidJob, match="dedupe_key"):
        dedupe_key(value)


@pytest.mark.parametrize("value", [MAX_SECONDS + 1, 1e300, float("nan"), -1, True])
def test_durations_out_of_range_are_refused(value):
    with pytest.raises(InvalidJob):
        seconds(value, "delay")


def test_error_text_is_made_storable_never_refused():
    assert error_text("bad\x00byte") == "bad\\x00byte"
    assert error_text("lone \ud800") == "lone \\ud800"
    assert len(error_text("x" * 50_000)) <= 20_000

    class Hostile:
        def __repr__(self):
            raise RuntimeError("no")

    assert "unrepresentable Hostile" in error_text(Hostile())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"kwargs": {"when": dt.date(2026, 1, 1)}}, "payload['kwargs']['when'] must be JSON"),
        ({"rows": [1, {"x": float("nan")}]}, "payload['rows'][1]['x'] must be JSON"),
        ({"n": 10**5000}, "payload['n'] must be JSON"),
        ({"a": ["ok", "b\x00c"]}, "payload['a'][1] must not contain NUL"),
        ({"a": {"k\x00": 1}}, "payload['a'] (the key 'k\\x00') must not contain NUL"),
        ({"text": "\ud800"}, "payload['text'] contains a lone surrogate"),
    ],
)
def test_a_refused_value_is_named_by_its_path(value, message):
    with pytest.raises(InvalidPayload, match=re.escape(message)):
        dump_json(value)
