"""The JOBQ setting, read once into a frozen dataclass (cleared when tests change settings)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from . import validation
from .database_context import ALIAS as _ALIAS
from .exceptions import ConfigurationError, JobqError
from .fairness import FairOptions
from .options import QUEUE_OPTIONS as QUEUE_OPTIONS  # re-exported
from .options import SCHEDULE_OPTIONS as SCHEDULE_OPTIONS  # re-exported
from .options import QueueOptions, ScheduleOptions, check_listen_databases
from .options import listen_target as listen_target  # re-exported

DAY = 24 * 3600
MAX_PAYLOAD_BYTES = 256 * 1024
POOL_MODES = ("session", "transaction")
DEFAULT_DATABASE = "default"  # JOBQ["DATABASE"] unless set
MAX_SHARD = 1023  # shard numbers: ids of shard n are n << 48 and up (django_jobq.shards)
METRICS_VIEWS = ("off", "staff", "token")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobqSettings:
    """Every knob of django-jobq; the JOBQ dict uses the same names in upper case."""

    database: str = DEFAULT_DATABASE  # database alias that holds jobq_job
    # alias the console and the metrics read (a streaming replica of DATABASE); None: a router's
    # replica for jobq's models, else DATABASE itself (django_jobq.replica)
    read_database: str | None = None
    read_lag_warning_seconds: float = 5  # the console says so when READ_DATABASE is further behind
    listen_database: str | None = None  # alias or DSN for LISTEN (bypassing a pooler); None: DATABASE
    # with SHARDS, LISTEN_DATABASE may be a dict: each database's alias -> its LISTEN target (here;
    # listen_database is then the home database's entry); not a key of JOBQ itself
    listen_databases: dict[str, str] = dataclasses.field(default_factory=dict)
    pool_mode: str = "session"  # "transaction": DATABASE goes through a transaction-mode pooler
    clock: str = "database"  # "database": now() in SQL; "python": timezone.now() (tests with time-machine)
    lease_seconds: float = 60  # how long a claimed job belongs to its worker without a heartbeat
    heartbeat_seconds: float = 10  # how often a worker renews the leases of its running jobs
    max_attempts: int = 5  # default attempts before a job goes DEAD
    backoff_base: float = 5  # first retry ceiling in seconds; doubles per attempt
    backoff_cap: float = 600  # retry delay ceiling in seconds
    short_retry_seconds: float = 10  # retries due within this delay run again in the same slot
    # a job of a task no worker that claims it knows waits (no attempt used) this long after its
    # enqueue for one that does (a rolling deploy), then goes DEAD
    unknown_task_grace: float = 3600
    max_payload_bytes: int = MAX_PAYLOAD_BYTES  # serialised payload limit
    max_result_bytes: int = 1024 * 1024  # serialised result limit: a bigger result sends the job DEAD
    error_history: int = 10  # failed attempts whose error each job keeps (error_count counts them all)
    free_releases: int = 3  # shutdown releases per job that do not use up an attempt
    claim_ahead: int = 8  # per slot, at most: jobs claimed beyond the free slots while runs are short
    statement_timeout: float = 30  # seconds; bounds every statement of the worker's and reaper's own
    lock_timeout: float = 5  # seconds; bounds any row-lock wait of those statements
    strict_tasks: bool = True  # refuse enqueue of task names that are not registered
    notify: bool = True  # NOTIFY on enqueue so idle workers wake at once
    notify_channel: str = "jobq"
    done_channel: str = "jobq_done"  # completion NOTIFY for wait_for() callers
    dedupe_done_seconds: float = DAY  # a dedupe key stays taken this long after its job is DONE
    dedupe_dead_seconds: float = 300  # ... and this long after it is DEAD
    poll_interval: float = 1.0  # safety-net polling when no notification arrives
    job_timeout: float | None = None  # default per-job timeout in seconds (None: no limit)
    permanent_exceptions: tuple[str, ...] = ()  # dotted paths of exceptions that go DEAD at once
    discard_on: tuple[str, ...] = ()  # dotted paths of exceptions that end a job CANCELLED at once
    max_snoozes: int = 100  # times one job may raise Snooze; the next Snooze is an ordinary failure
    middleware: tuple[str, ...] = ()  # dotted paths of mw(job, context, call_next), outermost first
    done_retention_seconds: float = 7 * DAY  # DONE jobs older than this are pruned by the reaper
    dead_retention_seconds: float = 30 * DAY  # DEAD jobs older than this are pruned by the reaper
    cancelled_retention_seconds: float = 7 * DAY  # CANCELLED jobs older than this are pruned
    prune_batch: int = 5000  # rows deleted per pruning statement
    reap_interval: float = 5.0  # seconds between reaper passes
    # Prepare the queue's statements on the server; None: yes, unless POOL_MODE is "transaction"
    # (True there needs PgBouncer >= 1.21 with max_prepared_statements > 0).
    prepared_statements: bool | None = None
    queues: dict[str, QueueOptions] = dataclasses.field(default_factory=dict)  # per-queue flow control
    # alias -> shard number (1..1023) of every database other than DATABASE that holds queues
    # (QUEUES[name]["DATABASE"]); the number puts its job ids in a range of their own (django_jobq.shards)
    shards: dict[str, int] = dataclasses.field(default_factory=dict)
    timezone: str | None = None  # schedules' default IANA zone; None: settings.TIME_ZONE
    schedules: dict[str, ScheduleOptions] = dataclasses.field(default_factory=dict)  # name -> schedule
    schedule_grace_seconds: float = 60  # a tick published later than this after its time is missed
    metrics_view: str = "off"  # who may read django_jobq.metrics.urls: "off", "staff" or "token"
    metrics_token: str | None = None  # the bearer token of METRICS_VIEW = "token" (at least 16 characters)
    metrics_cache_seconds: float = 5  # the database's figures are read at most this often per process
    metrics_timeout_seconds: float = 5  # a scrape waits at most this long for the database's figures
    bulk_queue: str = "default"  # the queue of the console's bulk actions (task django_jobq.admin_bulk)
    bulk_batch: int = 500  # jobs a bulk action changes per batch (one short transaction each)
    bulk_requeue_spread_seconds: float = 300  # a bulk requeue spreads its jobs' run_at over this long

    def caps(self) -> dict[str, int]:
        """Queue name -> MAX_RUNNING, for the capped queues."""
        return {name: o.max_running for name, o in self.queues.items() if o.max_running is not None}

    def fair_queues(self) -> dict[str, FairOptions]:
        """Queue name -> its FAIR options, for the fair queues."""
        return {name: o.fair for name, o in self.queues.items() if o.fair is not None}

    def depth_limits(self) -> dict[str, int]:
        """Queue name -> MAX_DEPTH, for the queues with one."""
        return {name: o.max_depth for name, o in self.queues.items() if o.max_depth is not None}

    def __post_init__(self) -> None:
        if self.clock not in ("database", "python"):
            raise ConfigurationError(f'JOBQ["CLOCK"] must be "database" or "python", not {self.clock!r}')
        positive = [
            "lease_seconds",
            "heartbeat_seconds",
            "backoff_base",
            "backoff_cap",
            "poll_interval",
            "max_payload_bytes",
            "prune_batch",
            "reap_interval",
            "max_attempts",
            "max_result_bytes",
            "error_history",
            "statement_timeout",
            "lock_timeout",
            "schedule_grace_seconds",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ConfigurationError(f'JOBQ["{name.upper()}"] must be a positive number, not {value!r}')
        if (
            not isinstance(self.free_releases, int)
            or isinstance(self.free_releases, bool)
            or self.free_releases < 0
        ):
            raise ConfigurationError('JOBQ["FREE_RELEASES"] must be an integer >= 0')
        if (
            not isinstance(self.claim_ahead, int)
            or isinstance(self.claim_ahead, bool)
            or not 0 <= self.claim_ahead <= 16
        ):
            raise ConfigurationError('JOBQ["CLAIM_AHEAD"] must be an integer in [0, 16]')
        if (
            not isinstance(self.max_snoozes, int)
            or isinstance(self.max_snoozes, bool)
            or not 0 <= self.max_snoozes <= 1_000_000
        ):
            raise ConfigurationError('JOBQ["MAX_SNOOZES"] must be an integer in [0, 1000000]')
        if not isinstance(self.error_history, int) or isinstance(self.error_history, bool):
            raise ConfigurationError('JOBQ["ERROR_HISTORY"] must be a positive integer')
        if self.lock_timeout > self.statement_timeout:
            raise ConfigurationError('JOBQ["LOCK_TIMEOUT"] must not exceed JOBQ["STATEMENT_TIMEOUT"]')
        if self.short_retry_seconds < 0:
            raise ConfigurationError('JOBQ["SHORT_RETRY_SECONDS"] must be >= 0')
        grace = self.unknown_task_grace
        if not isinstance(grace, int | float) or isinstance(grace, bool) or not 0 <= grace <= 365 * 86400:
            raise ConfigurationError(
                f'JOBQ["UNKNOWN_TASK_GRACE"] must be a number of seconds in [0, 31536000], not {grace!r}'
            )
        if self.job_timeout is not None and self.job_timeout <= 0:
            raise ConfigurationError('JOBQ["JOB_TIMEOUT"] must be positive or None')
        for name in (
            "dedupe_done_seconds", "dedupe_dead_seconds",
            "done_retention_seconds", "dead_retention_seconds", "cancelled_retention_seconds",
        ):  # fmt: skip
            value = getattr(self, name)
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not 0 <= value <= 10 * 366 * DAY
            ):
                raise ConfigurationError(
                    f'JOBQ["{name.upper()}"] must be a number of seconds >= 0 (up to ten years)'
                )
        for name in ("notify_channel", "done_channel"):
            channel = getattr(self, name)
            if (
                not isinstance(channel, str)
                or not channel
                or len(channel.encode("utf-8", "replace")) > 63
                or not channel.isprintable()
            ):
                raise ConfigurationError(
                    f'JOBQ["{name.upper()}"] must be a printable name of 1 to 63 bytes (used as given, case kept)'
                )
        self._check_metrics()
        self._check_bulk()
        if self.done_channel == self.notify_channel:
            raise ConfigurationError('JOBQ["DONE_CHANNEL"] must differ from JOBQ["NOTIFY_CHANNEL"]')
        self._check_connections()
        self._check_shards()

    def _check_metrics(self) -> None:
        if self.metrics_view not in METRICS_VIEWS:
            raise ConfigurationError(
                f'JOBQ["METRICS_VIEW"] must be one of {", ".join(METRICS_VIEWS)}, not {self.metrics_view!r:.100}'
            )
        token = self.metrics_token
        if token is not None and (not isinstance(token, str) or len(token) < 16 or not token.isprintable()):
            raise ConfigurationError(
                'JOBQ["METRICS_TOKEN"] must be a printable string of at least 16 characters'
            )
        if self.metrics_view == "token" and token is None:
            raise ConfigurationError('JOBQ["METRICS_VIEW"] = "token" needs JOBQ["METRICS_TOKEN"]')
        seconds = self.metrics_cache_seconds
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds <= 3600:
            raise ConfigurationError('JOBQ["METRICS_CACHE_SECONDS"] must be a number of seconds in [0, 3600]')
        seconds = self.metrics_timeout_seconds
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0.1 <= seconds <= 60:
            raise ConfigurationError(
                'JOBQ["METRICS_TIMEOUT_SECONDS"] must be a number of seconds in [0.1, 60]'
            )

    def _check_bulk(self) -> None:
        try:
            validation.queue(self.bulk_queue)
        except JobqError as exc:
            raise ConfigurationError(f'JOBQ["BULK_QUEUE"]: {exc}') from None
        batch = self.bulk_batch
        if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 10_000:
            raise ConfigurationError('JOBQ["BULK_BATCH"] must be an integer in [1, 10000]')
        spread = self.bulk_requeue_spread_seconds
        if not isinstance(spread, int | float) or isinstance(spread, bool) or not 0 <= spread <= DAY:
            raise ConfigurationError(
                'JOBQ["BULK_REQUEUE_SPREAD_SECONDS"] must be a number of seconds in [0, 86400]'
            )

    def _check_shards(self) -> None:
        """SHARDS, and the DATABASE of each queue (DATABASE itself or an alias of SHARDS)."""
        if not isinstance(self.shards, dict):
            raise ConfigurationError('JOBQ["SHARDS"] must be a dict: database alias -> shard number')
        numbers: dict[int, str] = {}
        for alias, number in self.shards.items():
            where = f'JOBQ["SHARDS"][{alias!r:.100}]'
            if not isinstance(alias, str) or alias not in settings.DATABASES:
                known = ", ".join(sorted(map(repr, settings.DATABASES)))
                raise ConfigurationError(f"{where}: not an alias of settings.DATABASES ({known})")
            if alias == self.database:
                raise ConfigurationError(f'{where}: JOBQ["DATABASE"] is shard 0 and is not listed')
            if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= MAX_SHARD:
                raise ConfigurationError(
                    f"{where} must be an integer in [1, {MAX_SHARD}], not {number!r:.100}"
                )
            if number in numbers:
                raise ConfigurationError(f"{where}: shard number {number} is also {numbers[number]!r}'s")
            numbers[number] = alias
        bulk = self.queues.get(self.bulk_queue)
        if bulk is not None and (bulk.databases or bulk.database not in (None, self.database)):
            raise ConfigurationError(
                'JOBQ["BULK_QUEUE"] must be a queue of JOBQ["DATABASE"] (the console\'s own)'
            )
        check_listen_databases(
            self.listen_databases, (self.database, *self.shards), self.shards,
            pooled=self.pool_mode == "transaction" and self.notify,
        )  # fmt: skip
        for name, options in self.queues.items():
            if options.database is not None and options.database not in (self.database, *self.shards):
                raise ConfigurationError(
                    f'JOBQ["QUEUES"][{name!r}]["DATABASE"] must be JOBQ["DATABASE"] or an alias of '
                    f'JOBQ["SHARDS"], not {options.database!r:.100}'
                )
            for alias in options.databases or ():
                if alias not in (self.database, *self.shards):
                    raise ConfigurationError(
                        f'JOBQ["QUEUES"][{name!r}]["DATABASES"]: {alias!r:.100} is neither '
                        'JOBQ["DATABASE"] nor an alias of JOBQ["SHARDS"]'
                    )

    def _check_connections(self) -> None:
        """DATABASE, READ_DATABASE, POOL_MODE, LISTEN_DATABASE and PREPARED_STATEMENTS (None resolved here)."""
        if not isinstance(self.database, str) or not self.database:
            raise ConfigurationError('JOBQ["DATABASE"] must be a database alias (a non-empty string)')
        if self.pool_mode not in POOL_MODES:
            raise ConfigurationError(
                f'JOBQ["POOL_MODE"] must be "session" or "transaction", not {self.pool_mode!r:.100}'
            )
        if self.prepared_statements is None:
            object.__setattr__(self, "prepared_statements", self.pool_mode == "session")
        elif not isinstance(self.prepared_statements, bool):
            raise ConfigurationError('JOBQ["PREPARED_STATEMENTS"] must be True, False or None')
        read = self.read_database
        if read is not None and (not isinstance(read, str) or read not in settings.DATABASES):
            known = ", ".join(sorted(map(repr, settings.DATABASES)))
            raise ConfigurationError(
                f'JOBQ["READ_DATABASE"] must be None or an alias of settings.DATABASES ({known}), '
                f"not {read!r:.100}"
            )
        lag = self.read_lag_warning_seconds
        if not isinstance(lag, int | float) or isinstance(lag, bool) or not 0 <= lag <= DAY:
            raise ConfigurationError(
                'JOBQ["READ_LAG_WARNING_SECONDS"] must be a number of seconds in [0, 86400]'
            )
        if self.listen_database is not None:
            listen_target(self.listen_database)  # raises for a value that is neither alias nor DSN
        if self.pool_mode == "transaction" and self.notify and self.listen_database in (None, self.database):
            raise ConfigurationError(
                'JOBQ["LISTEN_DATABASE"] must name a direct connection (an alias or a DSN that bypasses '
                'the pooler) when JOBQ["POOL_MODE"] is "transaction": LISTEN through a transaction '
                'pooler receives nothing. Or set JOBQ["NOTIFY"] = False to poll only.'
            )

    def lease_problem(self) -> str | None:
        """Why the lease is too short for the heartbeat, or None. A lease must outlive one missed
        heartbeat (a slow statement, a reconnect), so it must exceed twice the heartbeat interval."""
        if self.lease_seconds > 2 * self.heartbeat_seconds:
            return None
        return (
            f'JOBQ["LEASE_SECONDS"] ({self.lease_seconds}) must exceed twice JOBQ["HEARTBEAT_SECONDS"] '
            f"({self.heartbeat_seconds}), or a single late heartbeat loses a running job's lease"
        )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> JobqSettings:
        known = {f.name.upper(): f.name for f in dataclasses.fields(cls) if f.name != "listen_databases"}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigurationError(f"Unknown JOBQ setting(s): {', '.join(unknown)}")
        values = {known[key]: value for key, value in raw.items()}
        if isinstance(values.get("listen_database"), dict):  # each database's own LISTEN target
            each = values["listen_database"]
            if not raw.get("SHARDS"):
                raise ConfigurationError(
                    'JOBQ["LISTEN_DATABASE"] is a dict (database alias -> LISTEN target) only with JOBQ["SHARDS"]'
                )
            if not all(isinstance(alias, str) for alias in each):
                raise ConfigurationError('JOBQ["LISTEN_DATABASE"]\'s keys must be database aliases (strings)')
            home = values.get("database", DEFAULT_DATABASE)
            values["listen_databases"] = dict(each)
            values["listen_database"] = each.get(home) if isinstance(home, str) else None
        for name in ("permanent_exceptions", "discard_on", "middleware"):
            if name in values:
                if isinstance(values[name], str) or not isinstance(values[name], list | tuple):
                    raise ConfigurationError(f'JOBQ["{name.upper()}"] must be a list of dotted paths')
                values[name] = tuple(values[name])
        if "queues" in values:
            if not isinstance(values["queues"], dict):
                raise ConfigurationError('JOBQ["QUEUES"] must be a dict: queue name -> options')
            values["queues"] = {name: QueueOptions.parse(name, raw) for name, raw in values["queues"].items()}
        if "schedules" in values:
            if not isinstance(values["schedules"], dict):
                raise ConfigurationError('JOBQ["SCHEDULES"] must be a dict: schedule name -> options')
            limit = values.get("max_payload_bytes", MAX_PAYLOAD_BYTES)
            limit = limit if isinstance(limit, int) and limit > 0 else MAX_PAYLOAD_BYTES  # checked below
            values["schedules"] = {
                name: ScheduleOptions.parse(name, entry, limit) for name, entry in values["schedules"].items()
            }
        if values.get("timezone") is not None:
            from . import cron
            from .exceptions import InvalidJob

            try:
                cron.validate_timezone(values["timezone"])
            except InvalidJob as exc:
                raise ConfigurationError(f'JOBQ["TIMEZONE"]: {exc}') from None
        return cls(**values)


@functools.cache
def _configured() -> JobqSettings:
    return JobqSettings.from_dict(getattr(settings, "JOBQ", {}))


@functools.cache
def _placed(alias: str) -> JobqSettings:
    # a placed database is read directly (READ_DATABASE names the home database's replica) and
    # listened to directly, or on its own entry of a LISTEN_DATABASE dict (behind a pooler)
    placed = copy.copy(_configured())  # validated once, as configured: not again
    listen = _configured().listen_databases.get(alias)  # its own direct connection, if named
    for name, value in (("database", alias), ("read_database", None), ("listen_database", listen)):
        object.__setattr__(placed, name, value)
    return placed


def jobq_settings() -> JobqSettings:
    """The project's JobqSettings; raises ConfigurationError when JOBQ is invalid. Inside
    on_database(alias), DATABASE is that alias."""
    alias = _ALIAS.get()
    return _configured() if alias is None else _placed(alias)


def home_database() -> str:
    """JOBQ["DATABASE"], whatever on_database() says."""
    return _configured().database


@contextlib.contextmanager
def on_database(alias: str | None) -> Iterator[None]:
    """Run jobq's statements on ``alias`` inside the block (None or JOBQ["DATABASE"]: the home one).
    The setting is per context: a thread started inside the block does not inherit it."""
    token = _ALIAS.set(None if alias is None or alias == _configured().database else alias)
    try:
        yield
    finally:
        _ALIAS.reset(token)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting == "JOBQ":
        _configured.cache_clear()
        _placed.cache_clear()
