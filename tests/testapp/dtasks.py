"""Django tasks (django.tasks's @task on JobqBackend) the backend's tests enqueue and run.

Not a tasks.py: nothing imports it at start-up, so a worker finds these by module path."""

import asyncio

from django_jobq import RetryPolicy
from django_jobq.backend import task
from django_jobq.backend.compat import FORWARDS_TASK_OPTIONS
from django_jobq.backend.compat import task as django_task

from .models import Execution

QUICK = RetryPolicy(base=0.01, cap=0.01)


def _mark(label: str) -> None:
    """Record that a task body ran (its label in Execution.worker_id)."""
    Execution.objects.create(job_id=0, attempt=0, worker_id=label)


@django_task
def add(a, b):
    _mark(f"add:{a}+{b}")
    return a + b


@django_task
async def async_add(a, b):
    await asyncio.sleep(0)
    return {"sum": a + b}


@task(max_attempts=2, retry=QUICK)
def always_fails(label):
    _mark(f"fail:{label}")
    raise ValueError(f"boom {label}")


@task(max_attempts=3, retry=QUICK)
def flaky(label):
    """Fails on its first attempt only."""
    count = Execution.objects.filter(worker_id=f"flaky:{label}").count()
    _mark(f"flaky:{label}")
    if count == 0:
        raise ConnectionError("first attempt fails")
    return count + 1


@django_task(takes_context=True)
def with_context(context, label):
    result = context.task_result
    _mark(f"ctx:{label}")
    return {
        "status": str(result.status),
        "attempt": context.attempt,
        "id": result.id,
        "worker_ids": result.worker_ids,
    }


@django_task(queue_name="other")
def record(label):
    _mark(label)
    return label


@django_task
def noop():
    return None


if FORWARDS_TASK_OPTIONS:  # Django 6.1 and the backport pass @task's extra options to the task class

    @django_task(max_attempts=7, timeout=9)
    def forwarded():
        return "ok"


@task(max_attempts=2, retry=QUICK)
def exits(kind):
    """Raises SystemExit or KeyboardInterrupt, as a task may (sys.exit(), a library's)."""
    raise {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt}[kind](f"{kind} in a task")


@task(max_attempts=1)
def returns_a_function():
    return lambda: True


@django_task
def returns_bytes_and_a_tuple():
    return {"text": b"caf\xc3\xa9", "pair": (1, 2)}
