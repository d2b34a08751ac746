"""The backend's system checks: stable ids for bad OPTIONS and QUEUES."""

import pytest
from django.core import checks

from django_jobq.backend import JobqBackend, option_problems

pytestmark = [pytest.mark.unit, pytest.mark.p1]


def ids(options=None, queues=None):
    params = {"BACKEND": "django_jobq.backend.JobqBackend", "OPTIONS": options if options is not None else {}}
    if queues is not None:
        params["QUEUES"] = queues
    return [message.id for message in JobqBackend("default", params).check()]


def test_good_options_pass():
    assert ids() == []
    assert ids({"MAX_ATTEMPTS": 10, "TIMEOUT": 30}, ["default", "emails"]) == []


@pytest.mark.parametrize(
    ("options", "queues", "expected"),
    [
        ("MAX_ATTEMPTS=3", None, ["jobq.E101"]),
        ({"MAX_ATTEMPT": 3}, None, ["jobq.E101"]),
        ({"MAX_ATTEMPTS": 0}, None, ["jobq.E102"]),
        ({"MAX_ATTEMPTS": "3"}, None, ["jobq.E102"]),
        ({"TIMEOUT": 0}, None, ["jobq.E103"]),
        ({"TIMEOUT": -1}, None, ["jobq.E103"]),
        ({}, [], []),  # any queue, as Django reads an empty list
        ({}, "default", ["jobq.E104"]),
        ({}, ["*"], ["jobq.E104"]),
        (
            {"MAX_ATTEMPTS": 0, "TIMEOUT": "x", "COLOUR": 1},
            [""],
            ["jobq.E101", "jobq.E102", "jobq.E103", "jobq.E104"],
        ),
    ],
)
def test_bad_options_have_stable_ids(options, queues, expected):
    assert ids(options, queues) == expected


def test_messages_name_the_backend_and_the_key():
    (message,) = option_problems("bulk", {"TIMEOUT": 0}, None)
    assert "TASKS['bulk']['OPTIONS']['TIMEOUT']" in message.msg and message.hint


def test_the_check_framework_runs_them(settings):
    settings.TASKS = {"default": {"BACKEND": "django_jobq.backend.JobqBackend", "OPTIONS": {"RETRIES": 2}}}
    found = [m.id for m in checks.run_checks() if m.id and m.id.startswith("jobq.E10")]
    assert found == ["jobq.E101"]
