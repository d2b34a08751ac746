"""Tasks the test suite enqueues and runs."""

import asyncio
import datetime as dt
import functools
import os
import signal
import time

from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.utils import timezone

import django_jobq
from django_jobq import PermanentError, RetryPolicy

from .models import Execution, Ledger


@django_jobq.task(name="test.noop")
def noop(**kwargs):
    return None


@django_jobq.task(name="test.echo")
def echo(**kwargs):
    return kwargs


@django_jobq.task(name="test.sleep")
def sleep(seconds: float, **kwargs):
    time.sleep(seconds)
    return seconds


@django_jobq.task(name="test.occupy", takes_context=True)
def occupy(context, log: str, seconds: float = 0.0, **kwargs):
    """Append "<monotonic time> +1 <job id> <worker id>" to ``log`` as the body starts, and the same
    with -1 as it ends (each line one O_APPEND write: whole lines from any process; CLOCK_MONOTONIC is
    the machine's, shared by all of them), so a test can count the bodies running at once
    (tests/occupancy.py)."""
    _note(log, +1, context)
    time.sleep(seconds)
    _note(log, -1, context)


def _note(log: str, step: int, context) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{time.monotonic():.9f} {step:+d} {context.job_id} {context.worker_id}\n".encode())
    finally:
        os.close(fd)


@django_jobq.task(name="test.record", takes_context=True)
def record(context, pause: float = 0.0, **kwargs):
    """Log the execution, then optionally pause (so a drain or a restart can catch it running)."""
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id,
        ran_at=timezone.now(),
    )  # fmt: skip
    if pause:
        time.sleep(pause)
    return {"attempt": context.attempt}


@django_jobq.task(name="test.slow_first_attempt", takes_context=True)
def slow_first_attempt(context, seconds: float):
    """The first run records itself and hangs; later runs finish at once."""
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
    )
    if context.fence == 1:
        time.sleep(seconds)
    return {"attempt": context.attempt}


@django_jobq.task(name="test.exit_process", max_attempts=2)
def exit_process():
    os._exit(3)  # a poison job: takes its worker process down


@django_jobq.task(name="test.flaky", takes_context=True, retry=RetryPolicy(base=0.05, cap=0.1))
def flaky(context, failures: int):
    """Fails its first ``failures`` attempts, then succeeds."""
    if context.attempt <= failures:
        raise ConnectionError(f"transient failure on attempt {context.attempt}")
    return {"attempt": context.attempt}


@django_jobq.task(name="test.always_fails", retry=RetryPolicy(base=1000, cap=1000))
def always_fails():
    raise ValueError("boom")


@django_jobq.task(name="test.permanent")
def permanent():
    raise PermanentError("cannot ever work")


@django_jobq.task(name="test.lookup_error")
def lookup_error():
    raise LookupError("configured as permanent in the test")


@django_jobq.task(name="test.async_add")
async def async_add(a: int, b: int):
    await asyncio.sleep(0.01)
    return a + b


@django_jobq.task(name="test.async_hang", timeout=0.2, max_attempts=1)
async def async_hang():
    await asyncio.sleep(60)


@django_jobq.task(name="test.sync_hang", timeout=0.5, max_attempts=1)
def sync_hang(seconds: float = 3):
    time.sleep(seconds)
    return "too late"


@django_jobq.task(name="test.bad_result")
def bad_result():
    return {"when": object()}


@django_jobq.task(name="test.progress", takes_context=True)
def progress(context, steps: int):
    for step in range(1, steps + 1):
        context.set_progress(step, steps)
    return steps


@django_jobq.task(name="test.hostile_result")
def hostile_result(kind: str):
    """Return a value PostgreSQL could not store as it is."""
    return {
        "nul": {"text": "a\x00b"},
        "nul_key": {"a\x00": 1},
        "surrogate": "\ud800",
        "deep": functools.reduce(lambda inner, _: [inner], range(500), []),
        "huge": "x" * (2 * 1024 * 1024),
        "nan": float("nan"),
    }[kind]


class HostileError(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


@django_jobq.task(name="test.hostile_error", max_attempts=1)
def hostile_error(kind: str):
    """Raise an exception whose text PostgreSQL could not store, or that cannot be printed."""
    if kind == "nul":
        raise ValueError("bad\x00byte")
    if kind == "surrogate":
        raise ValueError("lone \ud800 surrogate")
    raise HostileError()


@django_jobq.task(name="test.takes_two")
def takes_two(a: int, b: int):
    return a + b


@django_jobq.task(name="test.locks_own_row", takes_context=True)
def locks_own_row(context, hold: float):
    """Report progress inside a transaction that stays open for ``hold`` seconds."""
    with transaction.atomic():
        Execution.objects.create(
            job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
        )
        context.set_progress(1, 2)
        time.sleep(hold)
    return "held"


@django_jobq.task(name="test.renews_long", takes_context=True)
def renews_long(context, seconds: float):
    """Ask for a long lease, then wait (so heartbeats run meanwhile)."""
    context.renew_lease(3600)
    time.sleep(seconds)
    return "renewed"


@django_jobq.task(
    name="test.slow_flaky", takes_context=True, timeout=1.5, retry=RetryPolicy(base=0.01, cap=0.01)
)
def slow_flaky(context, seconds: float):
    """Each attempt takes ``seconds``; the first fails, the second succeeds."""
    time.sleep(seconds)
    if context.attempt == 1:
        raise ConnectionError("first attempt fails late")
    return {"attempt": context.attempt}


@django_jobq.task(name="test.show_timeouts")
def show_timeouts():
    """The task's own connection settings (the worker's statement bounds must not leak into it)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')")
        return list(cursor.fetchone())


@django_jobq.task(name="test.windowed", dedupe_done=60, dedupe_dead=dt.timedelta(seconds=10))
def windowed(**kwargs):
    return None


@django_jobq.task(name="test.expensive", takes_context=True, max_attempts=1)
def expensive(context, key: str, pause: float = 0.3, fail: bool = False):
    """Single-flight's costly work: recorded in the ledger, slow enough for callers to pile up."""
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
    )
    time.sleep(pause)
    if fail:
        raise ValueError(f"expensive work for {key} failed")
    return {"key": key, "value": 42}


@django_jobq.task(name="test.atomic_record", takes_context=True, atomic=True, max_attempts=1)
def atomic_record(context, then: str = "return"):
    """Writes the ledger inside the job's transaction, then returns, raises, dies, or loses the job."""
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
    )
    if then == "raise":
        raise ValueError("failed after its write")
    if then == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    if then == "lose":  # another worker takes the job over meanwhile (its lease ran out, it was reaped)
        from tests.testapp.takeover import take_over

        take_over(context.job_id)
    return {"fence": context.fence}


@django_jobq.task(name="test.capped", max_running=2)
def capped(seconds: float = 0.02):
    time.sleep(seconds)


@django_jobq.task(name="test.capped_occupy", max_running=2, takes_context=True)
def capped_occupy(context, log: str, seconds: float = 0.02):
    """test.occupy under a task cap of 2: its bodies are counted from ``log`` (tests/occupancy.py)."""
    occupy.func(context, log, seconds)


@django_jobq.task(name="test.capped_occupy_one", max_running=1, takes_context=True)
def capped_occupy_one(context, log: str, seconds: float = 0.02):
    """test.occupy under a task cap of 1."""
    occupy.func(context, log, seconds)


@django_jobq.task(name="test.capped_per_key", max_running_per_key=1)
def capped_per_key(seconds: float = 0.02):
    time.sleep(seconds)


@django_jobq.task(name="test.rate_limited", takes_context=True, rate_limit="5/s")
def rate_limited(context):
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id,
        ran_at=timezone.now(),
    )  # fmt: skip


@django_jobq.task(name="test.ledger", takes_context=True, max_attempts=100)
def ledger(context, ms: int = 0, first_run_seconds: float = 0.0):
    """A reliability job: write the ledger row of this run (job, attempt, fence), then work ``ms``
    milliseconds; a first run (fence 1) takes ``first_run_seconds`` more."""
    Ledger.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
    )
    time.sleep(ms / 1000 + (first_run_seconds if context.fence == 1 else 0.0))
    return {"fence": context.fence}


@django_jobq.task(name="test.mark", takes_context=True)
def mark(context, path: str, seconds: float = 0.0):
    """Append "job_id worker_id start" to the file ``path`` as the run starts (a side effect outside
    the database, seen even while the worker's link to it is cut), work ``seconds``, then append
    "job_id worker_id end"."""
    with open(path, "a") as file:
        file.write(f"{context.job_id} {context.worker_id} start\n")
    time.sleep(seconds)
    with open(path, "a") as file:
        file.write(f"{context.job_id} {context.worker_id} end\n")


class FixedDelay(RetryPolicy):
    """Retry after exactly ``base`` seconds (no jitter)."""

    def delay(self, attempt, rng=None):
        return self.base


@django_jobq.task(name="test.fails_once", takes_context=True, retry=FixedDelay(base=20, cap=20))
def fails_once(context):
    """Record the run; the first attempt fails, to be retried 20 seconds later (a short retry under
    JOBQ["SHORT_RETRY_SECONDS"] of 30 or more, which may wait in its slot)."""
    Execution.objects.create(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id
    )
    if context.attempt == 1:
        raise ConnectionError("transient failure on the first attempt")
    return {"attempt": context.attempt}


# -- job control --------------------------------------------------------------------------------------
@django_jobq.task(name="test.until_cancelled", takes_context=True)
def until_cancelled(context, seconds: float = 60.0):
    """Record the start, then wait for a cancel (checking context.cancelled) for at most ``seconds``."""
    Execution.objects.create(job_id=context.job_id, attempt=context.attempt, fence=context.fence,
                             worker_id=context.worker_id, ran_at=timezone.now())  # fmt: skip
    context.cancelled.wait(seconds)
    context.check_cancelled()
    return "not cancelled"


@django_jobq.task(name="test.async_until_cancelled", takes_context=True)
async def async_until_cancelled(context, seconds: float = 60.0):
    from asgiref.sync import sync_to_async

    await sync_to_async(Execution.objects.create)(
        job_id=context.job_id, attempt=context.attempt, fence=context.fence, worker_id=context.worker_id,
        ran_at=timezone.now(),
    )  # fmt: skip
    await asyncio.sleep(seconds)
    return "not cancelled"


@django_jobq.task(name="test.ignores_cancel", takes_context=True)
def ignores_cancel(context, seconds: float = 60.0, path: str | None = None):
    """Record the start, wait for the cancel, then keep going a little and return a value anyway
    (and, given a ``path``, write "end" to that file first: a mark made without the database)."""
    Execution.objects.create(job_id=context.job_id, attempt=context.attempt, fence=context.fence,
                             worker_id=context.worker_id, ran_at=timezone.now())  # fmt: skip
    context.cancelled.wait(seconds)
    time.sleep(0.2)
    if path:
        with open(path, "w") as mark:
            mark.write("end")
    return "finished regardless"


@django_jobq.task(name="test.snoozer", takes_context=True)
def snoozer(context, times: int, seconds: float = 0.0):
    """Raise Snooze(seconds) the first ``times`` runs, then return how many snoozes it saw."""
    Execution.objects.create(job_id=context.job_id, attempt=context.attempt, fence=context.fence,
                             worker_id=context.worker_id, ran_at=timezone.now())  # fmt: skip
    if context.job.snoozes < times:
        raise django_jobq.Snooze(seconds)
    return {"snoozes": context.job.snoozes, "attempt": context.attempt}


@django_jobq.task(name="test.capped_snoozer", max_running=1, takes_context=True)
def capped_snoozer(context, seconds: float = 0.0):
    """One at a time (a cap of 1): snoozes ``seconds`` on its first run when asked to, else returns."""
    if seconds and not context.job.snoozes:
        raise django_jobq.Snooze(seconds)
    return {"snoozes": context.job.snoozes}


@django_jobq.task(name="test.bad_snooze")
def bad_snooze(seconds):
    raise django_jobq.Snooze(float(seconds) if seconds in ("nan", "inf") else seconds)


@django_jobq.task(name="test.discarder", max_attempts=5)
def discarder(reason: str = "its order was deleted"):
    raise django_jobq.Discard(reason)


@django_jobq.task(name="test.object_gone", max_attempts=5, discard_on=(ObjectDoesNotExist,))
def object_gone(pk: int):
    return Ledger.objects.get(pk=pk).pk  # Ledger.DoesNotExist is an ObjectDoesNotExist


@django_jobq.task(name="test.ledger_gone")
def ledger_gone(pk: int):
    return Ledger.objects.get(pk=pk).pk


@django_jobq.task(name="test.dependency_summary", takes_context=True)
def dependency_summary(context, **kwargs):
    """What a workflow's job saw of what it waited for."""
    return [[r.job_id, r.status, r.result] for r in context.dependency_results()]


@django_jobq.task(name="test.where_am_i")
def where_am_i():
    """The database jobq's calls in a task's own code go to (django_jobq.shards); None: the home one."""
    from django_jobq.database_context import current_database

    return {"database": current_database()}
