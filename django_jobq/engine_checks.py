"""The settings and tasks that need a feature the queue's engine lacks (sql/capabilities.py): a
system check error (jobq.E009) and a refusal to start a worker, never a silent difference."""

from __future__ import annotations

from typing import Any

from .conf import jobq_settings
from .sql import Capabilities, engine_for
from .tasks import Task, registered_tasks


def engine_problems(*, tasks: bool = True) -> list[str]:
    """One sentence per configured feature the engine of JOBQ["DATABASE"] does not have; with
    ``tasks``, the registered tasks' features too (enqueueing such a task is refused: task_features)."""
    conf = jobq_settings()
    caps: Capabilities = engine_for(conf.database).capabilities
    problems = []

    def need(feature: str, what: str) -> None:
        if not getattr(caps, feature):
            problems.append(f"{what} needs {feature}, which the {caps.engine} engine does not have")

    for queue in sorted(conf.caps()):
        need("queue_caps", f'JOBQ["QUEUES"][{queue!r}]["MAX_RUNNING"]')
    for queue in sorted(conf.depth_limits()):
        need("max_depth", f'JOBQ["QUEUES"][{queue!r}]["MAX_DEPTH"]')
    if conf.schedules:
        need("scheduler", 'JOBQ["SCHEDULES"]')
    for name, task in sorted(registered_tasks().items()) if tasks else ():
        for feature, what in task_features(task):
            need(feature, f"task {name!r} ({what})")
    return problems


def task_features(task: Task[Any, Any]) -> list[tuple[str, str]]:
    """The (capability, option) pairs a registered task's options need."""
    needs = []
    if task.max_running is not None or task.max_running_per_key is not None:
        needs.append(("task_caps", "max_running"))
    if task.rate_limit is not None:
        needs.append(("rate_limits", "rate_limit"))
    return needs


def engine_setup_problems(alias: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the engine's own requirements for ``alias``."""
    return engine_for(alias).setup_problems(alias)
