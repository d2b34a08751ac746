"""The settings and tasks that need a feature the queue's engine lacks (sql/capabilities.py): a
system check error (jobq.E009) and a refusal to start a worker, never a silent difference."""

from __future__ import annotations

from ..conf import jobq_settings
from ..registry import registered_tasks
from ..sql import Capabilities, engine_for


def engine_problems(*, tasks: bool = True) -> list[str]:
    """One sentence per configured feature the engine of JOBQ["DATABASE"] does not have; with
    ``tasks``, the registered tasks' features too (enqueueing such a task is refused: Task.features)."""
    conf = jobq_settings()
    caps: Capabilities = engine_for(conf.database).capabilities
    problems = []

    def need(feature: str, what: str) -> None:
        if not getattr(caps, feature):
            problems.append(f"{what} needs {feature}, which the {caps.engine} engine does not have")

    for queue in sorted(conf.caps()):
        need("queue_caps", f'JOBQ["QUEUES"][{queue!r}]["MAX_RUNNING"]')
    for queue, options in sorted(conf.queues.items()):
        if options.rate_limit is not None:
            need("rate_limits", f'JOBQ["QUEUES"][{queue!r}]["RATE_LIMIT"]')
    if conf.shards:
        need("shards", 'JOBQ["SHARDS"]')
    for queue in sorted(conf.fair_queues()):
        need("fair_queues", f'JOBQ["QUEUES"][{queue!r}]["FAIR"]')
    for queue in sorted(conf.depth_limits()):
        need("max_depth", f'JOBQ["QUEUES"][{queue!r}]["MAX_DEPTH"]')
    if conf.schedules:
        need("scheduler", 'JOBQ["SCHEDULES"]')
    for name, task in sorted(registered_tasks().items()) if tasks else ():
        for feature, what in task.features():
            need(feature, f"task {name!r} ({what})")
    return problems


def engine_setup_problems(alias: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) about the engine's own requirements for ``alias``."""
    return engine_for(alias).setup_problems(alias)
