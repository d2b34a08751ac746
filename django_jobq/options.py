"""The entries of JOBQ["QUEUES"] (flow control, fairness, placement) and JOBQ["SCHEDULES"], each
checked into a frozen dataclass, and the value of JOBQ["LISTEN_DATABASE"] (django_jobq.conf reads the
JOBQ setting with them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from .exceptions import ConfigurationError
from .fairness import FairOptions

QUEUE_OPTIONS = (
    "MAX_DEPTH",
    "MAX_RUNNING",
    "RATE_LIMIT",
    "FAIR",
    "DATABASE",
    "DATABASES",
)  # the keys a JOBQ["QUEUES"] entry may have
SCHEDULE_OPTIONS = ("TASK", "CRON", "AT", "TIMEZONE", "PAYLOAD", "QUEUE", "PRIORITY", "MISSED", "ENABLED")


LISTEN_WHERE = 'JOBQ["LISTEN_DATABASE"]'


def listen_target(value: Any, where: str = LISTEN_WHERE) -> tuple[str, str]:
    """JOBQ["LISTEN_DATABASE"] (or one entry of it, named by ``where``) as ("alias", name) or ("dsn",
    conninfo); ConfigurationError when it is neither an alias of settings.DATABASES nor a connection
    string psycopg can parse."""
    if not isinstance(value, str) or not value.strip():
        either = " or None" if where == LISTEN_WHERE else ""  # the setting may be None, not an entry of it
        raise ConfigurationError(f"{where} must be a database alias, a PostgreSQL DSN{either}")
    if "\x00" in value:  # libpq would read the text up to it only
        raise ConfigurationError(f"{where} must not contain a NUL byte")
    if value in settings.DATABASES:
        return "alias", value
    if "=" not in value and "://" not in value:
        known = ", ".join(sorted(map(repr, settings.DATABASES)))
        raise ConfigurationError(
            f"{where} {value!r:.100} is neither a database alias ({known}) nor a DSN "
            "('postgres://...' or 'host=... dbname=...')"
        )
    import psycopg

    try:
        psycopg.conninfo.conninfo_to_dict(value)
    except psycopg.ProgrammingError as exc:
        # libpq's message never contains the password (it names the syntax fault only).
        raise ConfigurationError(f"{where} is not a valid PostgreSQL DSN: {exc}") from None
    return "dsn", value


def check_listen_databases(
    listen_databases: dict[str, str], databases: tuple[str, ...], shards: Iterable[str], *, pooled: bool
) -> None:
    """JOBQ["LISTEN_DATABASE"] as a dict (SHARDS): each key one of jobq's ``databases`` (the home one
    first), each value an alias or a DSN; behind a transaction pooler (``pooled``: POOL_MODE, with
    NOTIFY on), one for every shard, none one of jobq's (pooled) aliases, and no two alike (each
    names its own server). ConfigurationError naming the entry otherwise."""
    for alias, target in listen_databases.items():
        where = f"{LISTEN_WHERE}[{alias!r:.100}]"
        if alias not in databases:
            raise ConfigurationError(f'{where}: neither JOBQ["DATABASE"] nor an alias of JOBQ["SHARDS"]')
        listen_target(target, where)
    if not pooled:
        return
    for alias in shards:
        if alias not in listen_databases:
            raise ConfigurationError(
                f"{LISTEN_WHERE} must name a direct connection for shard {alias!r} too "
                "(a dict: each database's alias -> an alias or a DSN that bypasses the pooler) "
                'when JOBQ["POOL_MODE"] is "transaction"; or set JOBQ["NOTIFY"] = False'
            )
    for alias, target in listen_databases.items():
        if target in databases:
            raise ConfigurationError(
                f"{LISTEN_WHERE}[{alias!r:.100}] names {target!r:.100}, a database of jobq's own, which "
                "goes through the pooler: name a direct connection to its server"
            )
    if len(set(listen_databases.values())) < len(listen_databases):
        raise ConfigurationError(
            f"{LISTEN_WHERE}: two databases name the same LISTEN target; each names its own server"
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueueOptions:
    """One entry of JOBQ["QUEUES"]: flow control for one queue."""

    max_running: int | None = None  # jobs RUNNING at once across every worker; None: no cap
    max_depth: int | None = (
        None  # PENDING + RUNNING jobs beyond which enqueue raises QueueFull; None: no limit
    )
    rate_limit: tuple[int, float] | None = None  # (jobs, seconds): starts allowed across every worker
    fair: FairOptions | None = None  # served round-robin by fairness key (django_jobq.fairness)
    database: str | None = None  # the alias whose server holds the queue's jobs; None: JOBQ["DATABASE"]
    # the aliases a spread queue's jobs are shared between (django_jobq.shards.database_for); None: one
    databases: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, name: Any, raw: Any) -> QueueOptions:
        where = f'JOBQ["QUEUES"][{name!r}]'
        if not isinstance(name, str) or not name or name != name.strip() or name == "*" or "\x00" in name:
            raise ConfigurationError(f"{where}: a queue name must be a non-empty string (not '*')")
        if not isinstance(raw, dict):
            raise ConfigurationError(f"{where} must be a dict of {', '.join(QUEUE_OPTIONS)}")
        unknown = sorted(str(key) for key in raw if key not in QUEUE_OPTIONS)
        if unknown:
            raise ConfigurationError(f"{where}: unknown option(s) {', '.join(unknown)}")
        for key, top in {"MAX_RUNNING": 1_000_000, "MAX_DEPTH": 1 << 40}.items():
            value = raw.get(key)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top
            ):
                raise ConfigurationError(
                    f'{where}["{key}"] must be an integer in [1, {top}], not {value!r:.100}'
                )
        rate = raw.get("RATE_LIMIT")
        database = raw.get("DATABASE")
        if database is not None and (not isinstance(database, str) or not database):
            raise ConfigurationError(f'{where}["DATABASE"] must be a database alias, not {database!r:.100}')
        return cls(
            database=database,
            databases=_spread(raw, where),
            max_running=raw.get("MAX_RUNNING"),
            max_depth=raw.get("MAX_DEPTH"),
            rate_limit=None if rate is None else rate_setting(rate, f'{where}["RATE_LIMIT"]'),
            fair=FairOptions.parse(raw.get("FAIR"), f'{where}["FAIR"]'),
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleOptions:
    """One entry of JOBQ["SCHEDULES"], checked except for its task (the registry fills later: the
    system check jobq.E006 looks the task up)."""

    name: str
    task: str
    cron: str | None = None  # a 5-field cron expression, normalised; or
    at: str | None = None  # a daily "HH:MM" time, normalised
    timezone: str | None = None  # IANA name; None: JOBQ["TIMEZONE"], then settings.TIME_ZONE
    payload: dict[str, Any] = dataclasses.field(default_factory=dict)
    queue: str | None = None  # None: the task's queue
    priority: int | None = None  # None: the task's priority
    missed: str = "skip"  # "skip", "latest" or "backfill:N"
    enabled: bool = True

    @classmethod
    def parse(cls, name: Any, raw: Any, max_payload_bytes: int) -> ScheduleOptions:
        from . import cron, ticks, validation
        from .exceptions import InvalidJob

        where = f'JOBQ["SCHEDULES"][{name!r:.120}]'
        try:
            ticks.validate_name(name)
            if not isinstance(raw, dict):
                raise InvalidJob(f"must be a dict of {', '.join(SCHEDULE_OPTIONS)}")
            unknown = sorted(str(key) for key in raw if key not in SCHEDULE_OPTIONS)
            if unknown:
                raise InvalidJob(f"unknown option(s) {', '.join(unknown)}")
            if ("CRON" in raw) == ("AT" in raw):
                raise InvalidJob('give exactly one of "CRON" (a cron expression) and "AT" ("HH:MM")')
            spec = ticks.validate_at(raw["AT"]) if "AT" in raw else ticks.validate_cron(raw["CRON"])
            zone = raw.get("TIMEZONE")
            payload = raw.get("PAYLOAD", {})
            validation.payload_json(payload, max_payload_bytes)
            queue, priority = raw.get("QUEUE"), raw.get("PRIORITY")
            enabled = raw.get("ENABLED", True)
            if not isinstance(enabled, bool):
                raise InvalidJob(f'"ENABLED" must be True or False, not {enabled!r:.100}')
            return cls(
                name=name,
                task=validation.name(raw.get("TASK"), "TASK"),
                cron=None if "AT" in raw else spec,
                at=spec if "AT" in raw else None,
                timezone=None if zone is None else cron.validate_timezone(zone),
                payload=payload,
                queue=None if queue is None else validation.queue(queue),
                priority=None if priority is None else validation.priority(priority),
                missed=ticks.parse_missed(raw.get("MISSED", "skip")).text,
                enabled=enabled,
            )
        except InvalidJob as exc:
            raise ConfigurationError(f"{where}: {exc}") from None


MAX_SPREAD = 64  # databases one queue is spread over, at most


def _spread(raw: dict[str, Any], where: str) -> tuple[str, ...] | None:
    """A queue's DATABASES: 2 to MAX_SPREAD distinct aliases (checked against JOBQ["SHARDS"] by
    conf), and not with DATABASE or MAX_DEPTH."""
    databases = raw.get("DATABASES")
    if databases is None:
        return None
    if not isinstance(databases, list | tuple) or not 2 <= len(databases) <= MAX_SPREAD:
        raise ConfigurationError(
            f'{where}["DATABASES"] must be a list of 2 to {MAX_SPREAD} database aliases, not {databases!r:.100}'
        )
    if any(not isinstance(alias, str) or not alias for alias in databases) or len(set(databases)) < len(
        databases
    ):
        raise ConfigurationError(f'{where}["DATABASES"] must name distinct aliases, not {databases!r:.100}')
    if raw.get("DATABASE") is not None:
        raise ConfigurationError(f'{where}: give "DATABASE" (one) or "DATABASES" (spread), not both')
    if raw.get("MAX_DEPTH") is not None:
        raise ConfigurationError(
            f'{where}: a queue spread over several databases takes no "MAX_DEPTH": each enqueue counts '
            "the jobs of its own database only (docs/operations/shards.md)"
        )
    return tuple(databases)


def rate_setting(text: Any, where: str) -> tuple[int, float]:
    """A rate limit string ("100/m") as (count, seconds); ConfigurationError when it is not one."""
    from .exceptions import InvalidJob
    from .validation import parse_rate

    try:
        return parse_rate(text)
    except InvalidJob as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
