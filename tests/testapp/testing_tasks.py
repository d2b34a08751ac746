"""Tasks the django_jobq.testing tests enqueue: chains, failures, discards, snoozes, ORM queries, and
Django Tasks on JobqBackend."""

import django_jobq
from django_jobq import RetryPolicy
from django_jobq.backend.compat import task as django_task

from .models import Execution

SLOW_RETRY = RetryPolicy(base=600, cap=600)  # a retry never due within a test


@django_jobq.task(name="testing.add")
def add(a: int, b: int) -> int:
    return a + b


@django_jobq.task(name="testing.mark")
def mark(label: str) -> None:
    Execution.objects.create(job_id=0, attempt=0, worker_id=label)


@django_jobq.task(name="testing.then")
def then(label: str, next_label: str | None = None) -> str:
    """Marks ``label``, then enqueues itself for ``next_label``."""
    Execution.objects.create(job_id=0, attempt=0, worker_id=label)
    if next_label is not None:
        then.enqueue(label=next_label)
    return label


@django_jobq.task(name="testing.forever")
def forever(n: int = 0) -> None:
    forever.enqueue(n=n + 1)


@django_jobq.task(name="testing.fails", max_attempts=3, retry=SLOW_RETRY)
def fails(reason: str = "boom") -> None:
    raise ValueError(reason)


@django_jobq.task(name="testing.discards")
def discards() -> None:
    raise django_jobq.Discard("the order is gone")


@django_jobq.task(name="testing.snoozes")
def snoozes() -> None:
    raise django_jobq.Snooze(600)


@django_jobq.task(name="testing.async_add")
async def async_add(a: int, b: int) -> int:
    return a + b


@django_jobq.task(name="testing.atomic_mark", atomic=True)
def atomic_mark(label: str) -> str:
    Execution.objects.create(job_id=0, attempt=0, worker_id=label)
    return label


@django_task
def django_add(a, b):
    return a + b


@django_task
def django_fails(label):
    raise ValueError(f"boom {label}")


@django_jobq.task(name="testing.exits", max_attempts=3, retry=SLOW_RETRY)
def exits(kind: str) -> None:
    """Raises SystemExit or KeyboardInterrupt, as a task may (sys.exit(), a library's)."""
    raise {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt}[kind](f"{kind} in a task")


@django_jobq.task(name="testing.async_fails", max_attempts=3, retry=SLOW_RETRY)
async def async_fails(reason: str = "boom") -> None:
    raise ValueError(reason)
