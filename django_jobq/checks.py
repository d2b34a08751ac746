"""System checks with stable ids (jobq.E001...)."""

from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, register
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
    elif connections[conf.database].vendor != "postgresql":
        errors.append(
            Error(
                f"django-jobq needs PostgreSQL; database {conf.database!r} uses "
                f"{connections[conf.database].vendor}.",
                hint="Point JOBQ['DATABASE'] at a django.db.backends.postgresql database.",
                id="jobq.E003",
            )
        )
    if problem := conf.lease_problem():
        errors.append(
            Error(problem, hint="Use a lease of at least three heartbeat intervals.", id="jobq.E004")
        )
    errors += _schedule_tasks(conf.schedules.values())
    return errors


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
