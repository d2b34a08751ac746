"""System checks with stable ids (jobq.E001...); engine.py says which configured features the
queue's engine lacks (also asked by a starting worker)."""

from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections, router
from django.utils.module_loading import import_string

from ..conf import JobqSettings, jobq_settings, listen_target
from ..exceptions import ConfigurationError, JobqError
from ..models import Job
from ..options import ScheduleOptions
from ..registry import get_task
from ..replica import read_alias
from . import shards as shards  # registers the shards' checks
from .engine import engine_problems, engine_setup_problems


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
        elif message.startswith('JOBQ["LISTEN_DATABASE"]'):
            check_id = "jobq.E007"
        elif message.startswith('JOBQ["READ_DATABASE"]'):
            check_id = "jobq.E013"
        return [Error(message, hint="See docs/reference/configuration.md.", id=check_id)]
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
    if conf.database in connections:
        errors += _routing(conf)
    errors += _listen_database(conf)
    errors += _read_database(conf)
    errors += _schedule_tasks(conf.schedules.values())
    errors += _exception_paths(conf)
    return errors


def _exception_paths(conf: JobqSettings) -> list[CheckMessage]:
    """jobq.E011 for an entry of JOBQ["PERMANENT_EXCEPTIONS"] or JOBQ["DISCARD_ON"] that does not
    import as an exception class, jobq.E012 for one of JOBQ["MIDDLEWARE"] that does not import as a
    callable (every job would otherwise fail on it)."""

    def is_exception(found: object) -> bool:
        return isinstance(found, type) and issubclass(found, BaseException)

    wanted = (
        ("PERMANENT_EXCEPTIONS", conf.permanent_exceptions, is_exception, "an exception class", "jobq.E011"),
        ("DISCARD_ON", conf.discard_on, is_exception, "an exception class", "jobq.E011"),
        ("MIDDLEWARE", conf.middleware, callable, "a callable", "jobq.E012"),
    )
    errors: list[CheckMessage] = []
    for setting, paths, fits, kind, check_id in wanted:
        for path in paths:
            try:
                found = import_string(path) if isinstance(path, str) else None
            except Exception as exc:  # ImportError, or whatever the module raises as it loads
                found, reason = None, str(exc)
            else:
                reason = f"not {kind}"
            if not fits(found):
                message = f'JOBQ["{setting}"]: {path!r:.200} does not name {kind} ({reason:.200})'
                errors.append(Error(message, hint=f"Give the dotted path of {kind}.", id=check_id))
    return errors


def _listen_database(conf: JobqSettings) -> list[CheckMessage]:
    """jobq.E007 when JOBQ["LISTEN_DATABASE"] (each database's entry, with SHARDS) names an alias that
    is not PostgreSQL (its value is otherwise checked with the settings, a DSN's reachability when the
    listener connects)."""
    targets = dict(conf.listen_databases)
    if conf.listen_database is not None:
        targets[conf.database] = conf.listen_database
    errors: list[CheckMessage] = []
    for database, target in targets.items():
        kind, alias = listen_target(target)
        if kind == "alias" and connections[alias].vendor != "postgresql":
            errors.append(
                Error(
                    f'JOBQ["LISTEN_DATABASE"] names {alias!r} for {database!r}, a '
                    f"{connections[alias].vendor} database; LISTEN needs PostgreSQL (the server "
                    f"{database!r} is on).",
                    hint="Name a direct PostgreSQL alias or DSN for that database's server, or None.",
                    id="jobq.E007",
                )
            )
    return errors


def _read_database(conf: JobqSettings) -> list[CheckMessage]:
    """jobq.E013 when the read alias (JOBQ["READ_DATABASE"], or a router's replica) is another kind
    of database than JOBQ["DATABASE"]: it must be a copy of it (a streaming replica)."""
    if conf.database not in connections:
        return []
    alias = read_alias()
    vendor, expected = connections[alias].vendor, connections[conf.database].vendor
    if vendor == expected:
        return []
    return [
        Error(
            f"django-jobq's console and metrics read {alias!r}, a {vendor} database, but JOBQ['DATABASE'] "
            f"is {expected}: the read alias must be a replica of JOBQ['DATABASE'].",
            hint='Set JOBQ["READ_DATABASE"] to a replica\'s alias, or None to read JOBQ["DATABASE"].',
            id="jobq.E013",
        )
    ]


def _routing(conf: JobqSettings) -> list[CheckMessage]:
    """jobq.E008 when the database routers send jobq's models (the ORM's writes, its reads unless to
    a replica, or its migrations) anywhere but JOBQ["DATABASE"]. Reads routed to another alias while
    writes go to JOBQ["DATABASE"] are a primary/replica router: the console reads there
    (django_jobq.replica), the queue itself always reads JOBQ["DATABASE"]."""
    read, write = router.db_for_read(Job), router.db_for_write(Job)
    migrates = router.allow_migrate(conf.database, "django_jobq", model_name="job")
    if write == conf.database and read in connections and migrates:
        return []
    return [
        Error(
            f'JOBQ["DATABASE"] is {conf.database!r}, but the database routers send jobq\'s reads to '
            f"{read!r} and writes to {write!r}"
            + ("" if migrates else f", and do not allow its migrations on {conf.database!r}"),
            hint='Add "django_jobq.routers.JobqRouter" to DATABASE_ROUTERS (see '
            "docs/operations/separate-database.md).",
            id="jobq.E008",
        )
    ]


def _engine(alias: str) -> list[CheckMessage]:
    """jobq.E003: no engine for the database; jobq.E009: a feature the engine lacks is configured;
    jobq.E010: the engine's own requirement is not met; jobq.W001: SQLite's atomic blocks are DEFERRED."""
    try:
        problems = engine_problems()
    except ConfigurationError as exc:
        hint = "Point JOBQ['DATABASE'] at a PostgreSQL or SQLite database."
        return [Error(str(exc), hint=hint, id="jobq.E003")]
    hint = "See docs/reference/engines.md."
    found: list[CheckMessage] = [Error(p, hint=hint, id="jobq.E009") for p in problems]
    errors, warnings = engine_setup_problems(alias)
    found += [Error(p, hint=hint, id="jobq.E010") for p in errors]
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
        if (problem := task_problem(schedule.task, schedule.payload))
    ]


def task_problem(task: str, payload: object) -> str | None:
    """Why ``task`` cannot be scheduled with ``payload`` (unknown, or the payload does not fit its
    signature), or None. Needs the task registry: call once the apps are ready."""
    try:
        get_task(task).check_call(payload)
    except JobqError as exc:
        return str(exc)
    return None
