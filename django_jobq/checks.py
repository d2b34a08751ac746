"""System checks with stable ids (jobq.E001...)."""

from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections

from . import ticks
from .conf import ScheduleOptions, jobq_settings
from .exceptions import ConfigurationError


@register()
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        conf = jobq_settings()
    except ConfigurationError as exc:
        message = str(exc)
        check_id = "jobq.E001"
        if message.startswith('JOBQ["QUEUES"]'):
            check_id = "jobq.E005"
        elif message.startswith('JOBQ["SCHEDULES"]'):
            check_id = "jobq.E006"
        return [Error(message, hint="See the configuration reference in README.md.", id=check_id)]
    errors: list[CheckMessage] = []
    if conf.database not in connections:
        errors.append(
            Error(f'JOBQ["DATABASE"] names an unknown database alias {conf.database!r}', id="jobq.E002")
        )
    else:
        errors += _engine(conf.database)
    if problem := conf.lease_problem():
        errors.append(
            Error(problem, hint="Use a lease of at least three heartbeat intervals.", id="jobq.E004")
        )
    errors += _schedule_tasks(conf.schedules.values())
    return errors


def _engine(alias: str) -> list[CheckMessage]:
    """jobq.E003: no engine for the database; jobq.E007: a feature the engine lacks is configured;
    jobq.E008: the engine's own requirement is not met; jobq.W001: SQLite's atomic blocks are DEFERRED."""
    from .engine_checks import engine_problems, engine_setup_problems

    try:
        problems = engine_problems()
    except ConfigurationError as exc:
        hint = "Point JOBQ['DATABASE'] at a PostgreSQL or SQLite database."
        return [Error(str(exc), hint=hint, id="jobq.E003")]
    hint = "See README.md, Engines."
    found: list[CheckMessage] = [Error(p, hint=hint, id="jobq.E007") for p in problems]
    errors, warnings = engine_setup_problems(alias)
    found += [Error(p, hint=hint, id="jobq.E008") for p in errors]
    found += [Warning(p, hint=hint, id="jobq.W001") for p in warnings]
    return found


def _schedule_tasks(schedules: Iterable[ScheduleOptions]) -> list[CheckMessage]:
    """jobq.E006 for each settings schedule whose task is unknown or does not take its payload."""
    return [
        Error(
            f'JOBQ["SCHEDULES"][{schedule.name!r}]: {problem}',
            hint="See docs/scheduler.md.",
            id="jobq.E006",
        )
        for schedule in schedules
        if (problem := ticks.task_problem(schedule.task, schedule.payload))
    ]
