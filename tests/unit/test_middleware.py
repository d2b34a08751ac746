"""worker.middleware: the chain's order and its sync and async forms (no database)."""

import asyncio
from types import SimpleNamespace

import pytest

from django_jobq.worker import middleware
from tests.testapp import middleware as recorded

pytestmark = pytest.mark.unit

JOB = SimpleNamespace(id=7, payload={})
CONTEXT = SimpleNamespace(attempt=1, fence=3)


@pytest.fixture(autouse=True)
def fresh_calls():
    recorded.CALLS.clear()
    yield
    recorded.CALLS.clear()


def test_the_first_middleware_is_outermost():
    result = middleware.run_sync((recorded.outer, recorded.inner), JOB, CONTEXT, lambda: "ran")
    assert result == "ran"
    assert recorded.CALLS == [
        ("outer:before", 7, 1), ("inner:before", 7, 3), ("inner:after", 7, None), ("outer:after", 7, "ran"),
    ]  # fmt: skip


def test_an_async_run_is_awaited_inside_async_and_plain_middleware():
    async def task():
        await asyncio.sleep(0)
        return "ran"

    chain = (recorded.timing, recorded.outer)
    assert asyncio.run(middleware.run_async(chain, JOB, CONTEXT, task)) == "ran"
    names = [name for name, _, _ in recorded.CALLS]
    assert names == ["timing:before", "outer:before", "outer:after", "timing:after"]
    assert recorded.CALLS[-1] == ("timing:after", 7, "ran")  # the async middleware saw the result


def test_what_a_middleware_raises_reaches_the_caller():
    job = SimpleNamespace(id=8, payload={"break": True})
    with pytest.raises(RuntimeError, match="middleware refused job 8"):
        middleware.run_sync((recorded.outer, recorded.broken), job, CONTEXT, lambda: "never")
    assert [name for name, _, _ in recorded.CALLS] == ["outer:before"]
