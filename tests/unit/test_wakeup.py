"""notify.wakeup: the in-process wake-ups of an engine without LISTEN/NOTIFY (SQLite)."""

import logging

import pytest

from django_jobq.notify import wakeup

pytestmark = pytest.mark.unit


@pytest.fixture
def woken():
    """Two registered wakers recording what they were woken with; unregistered afterwards."""
    calls: dict[str, list[str | None]] = {"a": [], "b": []}
    wakers = {name: calls[name].append for name in calls}
    for waker in wakers.values():
        wakeup.register(waker)
    yield calls, wakers
    for waker in wakers.values():
        wakeup.unregister(waker)


def test_every_waker_is_woken_with_every_payload(woken):
    calls, _ = woken
    wakeup.notify(["default", "mail"])
    assert calls == {"a": ["default", "mail"], "b": ["default", "mail"]}


def test_an_unregistered_waker_is_not_woken_and_unregistering_twice_is_harmless(woken):
    calls, wakers = woken
    wakeup.unregister(wakers["a"])
    wakeup.unregister(wakers["a"])
    wakeup.notify(["default"])
    assert calls == {"a": [], "b": ["default"]}


def test_a_failing_waker_is_logged_and_the_others_are_still_woken(woken, caplog):
    calls, _ = woken

    def broken(payload: str | None) -> None:
        raise RuntimeError("boom")

    later: list[str | None] = []
    wakeup.register(broken)
    wakeup.register(later.append)  # registered after the broken one
    try:
        with caplog.at_level(logging.ERROR, logger="django_jobq"):
            wakeup.notify(["default"])  # raises nothing: an enqueue's on_commit calls this
    finally:
        wakeup.unregister(broken)
        wakeup.unregister(later.append)
    assert calls == {"a": ["default"], "b": ["default"]} and later == ["default"]
    assert "in-process wake-up failed" in caplog.text and "boom" in caplog.text
