"""Django's Tasks API, from Django itself (6.0+: django.tasks) or the django-tasks backport (5.2).

The one module that imports either; the backend and its runner import from here."""

from __future__ import annotations

from typing import Any

import django

if django.VERSION >= (6, 0):
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:  # pragma: no cover - exercised in the Django 5.2 environment
    from django_tasks import (  # type: ignore[no-redef,import-not-found,assignment,unused-ignore]
        TaskContext,
        TaskResult,
        TaskResultStatus,
        task,
        task_backends,
    )
    from django_tasks.backends.base import (  # type: ignore[no-redef,import-not-found,assignment,unused-ignore]
        BaseTaskBackend,
    )
    from django_tasks.base import (  # type: ignore[no-redef,import-not-found,assignment,unused-ignore]
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskError,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef,import-not-found,assignment,unused-ignore]
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef,import-not-found,assignment,unused-ignore]
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import (  # type: ignore[no-redef,import-not-found,assignment,unused-ignore]
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        normalize_json,
    )

# Does ``task()`` forward unknown keyword arguments to the backend's task_class? Django 6.1 and the
# backport do; Django 6.0 does not (use django_jobq.backend.task there for jobq's options).
FORWARDS_TASK_OPTIONS: bool = django.VERSION >= (6, 1) or django.VERSION < (6, 0)


def set_attr(obj: Any, name: str, value: Any) -> None:
    """Set a field of Django's frozen result dataclasses, as Django's own backends do."""
    object.__setattr__(obj, name, value)


__all__ = [
    "FORWARDS_TASK_OPTIONS",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "set_attr",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
