"""The worker side of the django.tasks backend: a Django task as a jobq task, and running it.

A Django task is registered in jobq's registry under its module path, with a runner function that
calls it with Django's semantics (TaskContext, task_started / task_finished). A worker meeting a row
whose task nobody registered resolves the name here: it imports a module only if it is already
imported or belongs to an installed app, and accepts only a Task bound to a JobqBackend there; any
other name (a forged row naming ``os.system``) stays unknown, so the job goes DEAD running nothing.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.utils import timezone

from .. import registry
from ..exceptions import InvalidPayload, PayloadMismatch, PermanentError
from ..managers import result_json
from ..tasks import _binding_problem, _signature
from ..tasks import task as jobq_task
from .compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResultStatus,
    normalize_json,
    set_attr,
    task_finished,
    task_started,
)
from .results import running_result

if TYPE_CHECKING:
    from ..context import JobContext
    from ..tasks import Task as JobqTaskEntry

logger = logging.getLogger("django_jobq")


def register(task: Any, backend: Any) -> JobqTaskEntry[Any, Any]:
    """Register the Django ``task`` as the jobq task named by its module path."""
    run = _runner(task, backend)
    timeout = _given(getattr(task, "timeout", None), backend.default_timeout)
    return jobq_task(
        name=task.module_path, queue=task.queue_name, priority=100 - task.priority,
        max_attempts=_given(getattr(task, "max_attempts", None), backend.default_max_attempts),
        timeout=timeout, retry=getattr(task, "retry", None), takes_context=True,
        dedupe_done=getattr(task, "dedupe_done", None), dedupe_dead=getattr(task, "dedupe_dead", None),
        max_running=getattr(task, "max_running", None),
        max_running_per_key=getattr(task, "max_running_per_key", None),
        rate_limit=getattr(task, "rate_limit", None),
    )(run)  # fmt: skip


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value


def resolve(name: str) -> JobqTaskEntry[Any, Any] | None:
    """The registered jobq task for a Django task named by module path, importing its module only
    when it is already imported or belongs to an installed app; None for anything else."""
    module_name, _, attribute = name.rpartition(".")
    if not module_name or not attribute.isidentifier():
        return None
    module = sys.modules.get(module_name)
    if module is None:
        if not _in_installed_app(module_name):
            return None
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # a broken module: the name stays unknown
            logger.warning("could not import %s for task %s: %s", module_name, name, exc)
            return None
    found = module.__dict__.get(attribute)
    if not isinstance(found, Task) or found.module_path != name:
        return None
    backend = found.get_backend()
    if not getattr(type(backend), "runs_on_jobq", False):  # a JobqBackend (backend.py: above this module)
        return None
    return registry.find_task(name) or register(found, backend)


def _in_installed_app(module_name: str) -> bool:
    return any(
        module_name == config.name or module_name.startswith(config.name + ".")
        for config in apps.get_app_configs()
    )


def _runner(task: Any, backend: Any) -> Callable[..., Any]:
    """The function the worker calls with (JobContext, args, kwargs): a coroutine function for an
    async task, so it runs on the slot's event loop under the job's timeout."""
    if inspect.iscoroutinefunction(task.func):

        async def run(context: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
            result, call_args = _start(task, backend, context, args, kwargs)
            try:
                value = _checked(await task.func(*call_args, **kwargs))
            except BaseException as exc:
                _finish_failed(task, backend, context, result, exc)
                raise
            return _finish_ok(backend, result, value)

    else:

        def run(context: JobContext, args: list[Any], kwargs: dict[str, Any]) -> Any:  # type: ignore[misc]
            result, call_args = _start(task, backend, context, args, kwargs)
            try:
                value = _checked(task.func(*call_args, **kwargs))
            except BaseException as exc:
                _finish_failed(task, backend, context, result, exc)
                raise
            return _finish_ok(backend, result, value)

    run.django_task = task  # type: ignore[attr-defined]
    run.jobq_origin = task.module_path  # type: ignore[attr-defined]
    return run


def _start(task: Any, backend: Any, context: JobContext, args: Any, kwargs: Any) -> tuple[Any, list[Any]]:
    """The RUNNING result, the call's positional arguments (checked to fit the function), and
    task_started sent."""
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise InvalidPayload("a Django task's payload holds a list 'args' and an object 'kwargs'")
    positional = len(args) + (1 if task.takes_context else 0)
    if (problem := _binding_problem(task.func, positional, tuple(kwargs))) is not None:
        raise PayloadMismatch(f"arguments do not fit {task.module_path}{_signature(task.func)}: {problem}")
    result = running_result(task, backend.alias, context)
    call_args = [TaskContext(task_result=result), *args] if task.takes_context else list(args)
    _send(task_started, backend, result)
    return result, call_args


def _checked(value: Any) -> Any:
    """The task's return value as it is stored, checked before the run is announced SUCCESSFUL:
    Django's normal form (a TypeError for a type JSON has not, as Django's backends raise), then
    jobq's (strict JSON within JOBQ["MAX_RESULT_BYTES"])."""
    if value is None:  # most tasks return nothing
        return None
    value = normalize_json(value)
    result_json(value)
    return value


def _finish_ok(backend: Any, result: Any, value: Any) -> Any:
    set_attr(result, "status", TaskResultStatus.SUCCESSFUL)
    set_attr(result, "finished_at", timezone.now())
    set_attr(result, "_return_value", value)
    _send(task_finished, backend, result)
    return value


def _finish_failed(task: Any, backend: Any, context: JobContext, result: Any, exc: BaseException) -> None:
    """On the attempt that ends the job (permanent error or no attempts left): FAILED, task_finished."""
    from ..worker.classify import class_path, default_policy, format_error

    entry = registry.find_task(task.module_path)
    policy = (entry.retry if entry else None) or default_policy()
    permanent = isinstance(exc, (PermanentError, InvalidPayload, *policy.permanent))
    if not permanent and context.attempt < context.max_attempts:
        return  # the job goes back to READY for another attempt
    result.errors.append(TaskError(exception_class_path=class_path(exc), traceback=format_error(exc)))
    set_attr(result, "status", TaskResultStatus.FAILED)
    set_attr(result, "finished_at", timezone.now())
    _send(task_finished, backend, result)


def _send(signal: Any, backend: Any, result: Any) -> None:
    """Send a Django task signal; a receiver that raises is logged, never fails the job."""
    for receiver, response in signal.send_robust(sender=type(backend), task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "task signal receiver %r raised", receiver,
                exc_info=(type(response), response, response.__traceback__),
            )  # fmt: skip
