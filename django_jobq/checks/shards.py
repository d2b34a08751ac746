"""Shard databases (django_jobq.shards): their id ranges, set when each is migrated, and the system
checks jobq.E014 (a shard that is not PostgreSQL or not routed) and jobq.W015 (one not migrated or
whose ids are not bounded to its range: run with ``check --database ALIAS`` and by ``migrate``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import home_database, jobq_settings, on_database
from ..exceptions import ConfigurationError
from ..models import Job
from ..shards import ID_TABLES, every_database, id_ceiling, id_floor
from ..sql.postgres import shards as sql

HINT = "See docs/operations/shards.md."


def _range_of(connection: BaseDatabaseWrapper, table: str) -> tuple[Any, ...] | None:
    """(sequence, min_value, max_value, last_value, min id, max id) of ``table``, or None when the
    table is not there (the alias is not migrated)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [table])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(sql.ID_RANGE.format(table=table), {"table": table})
        row = cursor.fetchone()
    return tuple(row) if row else None


def _shard_aliases() -> list[str]:
    """Every database of a sharded setup (none when JOBQ["SHARDS"] is empty)."""
    return every_database() if jobq_settings().shards else []


def set_id_ranges(using: str, **kwargs: Any) -> None:
    """post_migrate: bound ``using``'s id sequences to its shard's range (a fresh shard starts at its
    floor). Refuses (ConfigurationError: the migrate fails) a database whose rows hold ids of another
    range: its jobs would be looked for on another database."""
    if using not in _shard_aliases() or connections[using].vendor != "postgresql":
        return
    connection = connections[using]
    floor, ceiling = id_floor(using), id_ceiling(using)
    for table in ID_TABLES:
        found = _range_of(connection, table)
        if found is None:
            continue
        sequence, _, _, last, lowest, highest = found
        if lowest is not None and (lowest < floor or highest > ceiling):
            raise ConfigurationError(
                f"database {using!r} holds {table} ids {lowest}..{highest}, outside its shard's range "
                f"{floor}..{ceiling}: a shard must start empty (move its jobs away first)"
            )
        statement = sql.RESTART_AT_FLOOR if last is None or last < floor else sql.SET_ID_RANGE
        with connection.cursor() as cursor:
            cursor.execute(statement.format(sequence=sequence, floor=floor, ceiling=ceiling))


@register()
def check_shards(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """jobq.E014: a shard alias that is not PostgreSQL, or that the routers do not send jobq's
    models and migrations to."""
    try:
        aliases = _shard_aliases()
    except ConfigurationError:
        return []  # check_settings reports it
    errors: list[CheckMessage] = []
    for alias in aliases:
        if alias not in connections:
            continue  # check_settings reports JOBQ["DATABASE"]; SHARDS' aliases are validated
        if connections[alias].vendor != "postgresql":
            errors.append(Error(f"shard database {alias!r} is not PostgreSQL", hint=HINT, id="jobq.E014"))
            continue
        with on_database(alias):
            routed = router.db_for_write(Job) == alias and router.db_for_read(Job) in (alias, None)
        if not routed or not router.allow_migrate(alias, "django_jobq", model_name="job"):
            errors.append(
                Error(
                    f"the database routers do not send jobq's models and migrations to shard {alias!r}",
                    hint='Add "django_jobq.routers.JobqRouter" to DATABASE_ROUTERS. ' + HINT,
                    id="jobq.E014",
                )
            )
    return errors


def range_problem(alias: str) -> str | None:
    """Why shard ``alias``'s id sequences are not bounded to its range (it is not migrated, or was
    migrated before JOBQ["SHARDS"] named it), or None. None for the home database: its ids start at 1
    as they always did, and reach shard 1's range only after 2.8e14 of them (migrate bounds it anyway)."""
    if alias == home_database():
        return None
    for table in ID_TABLES:
        found = _range_of(connections[alias], table)
        if found is None:
            return f"shard {alias!r} has no {table} table: run `manage.py migrate --database {alias}`"
        if (found[1], found[2]) != (id_floor(alias), id_ceiling(alias)):
            return (
                f"shard {alias!r}: {table} ids run {found[1]}..{found[2]}, not its range "
                f"{id_floor(alias)}..{id_ceiling(alias)}: run `manage.py migrate --database {alias}`"
            )
    return None


@register(Tags.database)
def check_shard_ranges(
    app_configs: Sequence[AppConfig] | None = None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """jobq.W015: a database of ``databases`` whose id sequences are not bounded to its shard's range
    (``migrate --database ALIAS`` bounds them). A warning, so that it never keeps migrate, which runs
    the database checks first, from doing just that; a worker refuses such a database."""
    try:
        aliases = [a for a in _shard_aliases() if a in (databases or ()) and a in connections]
    except ConfigurationError:
        return []
    warnings: list[CheckMessage] = []
    for alias in aliases:
        if connections[alias].vendor == "postgresql" and (problem := range_problem(alias)):
            hint = HINT
            warnings.append(Warning(problem, hint=hint, id="jobq.W015"))
    return warnings
