"""Every statement django-jobq runs, one engine per database, the same names in each.

``engine_for(alias)`` is the engine of a database alias: its statements, its Capabilities
(sql/capabilities.py) and how they run (the base in sql/engine.py, each engine's in its folder's
engine.py). Nothing outside this package asks which database it talks to.

Each engine's statements are one namespace gathered from its folder's files, split by concern:
sql/postgres/ jobs (the job's transitions), leases (renewal, release, reaping), retention (counts and prune), returns (jobs given back unstarted), enqueue (inserting jobs and the dedupe
rule), depth (MAX_DEPTH), pick (the claim's selection), fairness (fair queues), seats (capped queues' seats), inbound (first_seen), queues (pause),
workers (worker records, maintenance leases, timeouts), schedules (the scheduler's passes and the
settings sync), workflows (jobs with dependencies); sql/sqlite/ jobs, enqueue, state (workers, leases, queues, inbound marks), schedules.
The dashboard's statements are each folder's stats. A name defined twice in one engine is an error at
import; a name one engine has and the other lacks is an error too.
"""

from types import ModuleType, SimpleNamespace
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..exceptions import ConfigurationError
from .capabilities import POSTGRESQL, SQLITE, Capabilities
from .engine import Engine, Result, Script, Unsupported
from .postgres import batches as pg_batches
from .postgres import control as pg_control
from .postgres import depth as pg_depth
from .postgres import enqueue as pg_enqueue
from .postgres import fairness as pg_fairness
from .postgres import inbound as pg_inbound
from .postgres import jobs as pg_jobs
from .postgres import leases as pg_leases
from .postgres import outbox as pg_outbox
from .postgres import queues as pg_queues
from .postgres import retention as pg_retention
from .postgres import returns as pg_returns
from .postgres import schedules as pg_schedules
from .postgres import seats as pg_seats
from .postgres import stats as pg_stats
from .postgres import workers as pg_workers
from .postgres import workflows as pg_workflows
from .postgres.engine import PostgresEngine
from .sqlite import batches as lite_batches
from .sqlite import control as lite_control
from .sqlite import enqueue as lite_enqueue
from .sqlite import fairness as lite_fairness
from .sqlite import inbound as lite_inbound
from .sqlite import jobs as lite_jobs
from .sqlite import outbox as lite_outbox
from .sqlite import queues as lite_queues
from .sqlite import schedules as lite_schedules
from .sqlite import seats as lite_seats
from .sqlite import stats as lite_stats
from .sqlite import workers as lite_workers
from .sqlite import workflows as lite_workflows
from .sqlite.engine import SqliteEngine

__all__ = ["Capabilities", "Engine", "Result", "engine_for", "statements_for"]


def _statements(*modules: ModuleType) -> Any:
    """The statements (upper-case names) of ``modules`` in one namespace."""
    names: dict[str, Any] = {}
    for module in modules:
        for name, value in vars(module).items():
            if name.isupper() and not name.startswith("_") and isinstance(value, str | Script | Unsupported):
                if name in names and names[name] is not value:
                    raise ImportError(f"statement {name} is defined twice ({module.__name__})")
                names[name] = value
    return SimpleNamespace(**names)


POSTGRES = _statements(
    pg_jobs,
    pg_leases,
    pg_retention,
    pg_returns,
    pg_depth,
    pg_enqueue,
    pg_inbound,
    pg_queues,
    pg_schedules,
    pg_workers,
    pg_control,
    pg_workflows,
    pg_batches,
    pg_fairness,
    pg_seats,
    pg_outbox,
)
SQLITE_STATEMENTS = _statements(
    lite_jobs,
    lite_enqueue,
    lite_inbound,
    lite_queues,
    lite_schedules,
    lite_workers,
    lite_control,
    lite_workflows,
    lite_batches,
    lite_fairness,
    lite_seats,
    lite_outbox,
)

if _odd := set(vars(POSTGRES)) ^ set(vars(SQLITE_STATEMENTS)):
    raise ImportError(f"statements missing from one engine: {sorted(_odd)}")

# The dashboard's statements (read by the admin and jobq_stats), the same names in each engine.
POSTGRES_STATS = _statements(pg_stats)
SQLITE_STATS = _statements(lite_stats)
if _odd := set(vars(POSTGRES_STATS)) ^ set(vars(SQLITE_STATS)):
    raise ImportError(f"dashboard statements missing from one engine: {sorted(_odd)}")

ENGINES: dict[str, Engine] = {
    "postgresql": PostgresEngine("postgresql", POSTGRES, POSTGRESQL, POSTGRES_STATS),
    "sqlite": SqliteEngine("sqlite", SQLITE_STATEMENTS, SQLITE, SQLITE_STATS),
}


def engine_of(connection: BaseDatabaseWrapper) -> Engine:
    """The engine of ``connection``'s vendor; ConfigurationError for a database without one."""
    try:
        return ENGINES[connection.vendor]
    except KeyError:
        raise ConfigurationError(
            f"django-jobq runs on PostgreSQL or SQLite; database {connection.alias!r} is {connection.vendor}"
        ) from None


def engine_for(alias: str) -> Engine:
    """The engine of the database alias ``alias``."""
    return engine_of(connections[alias])


def statements_for(connection: BaseDatabaseWrapper) -> Any:
    """The statements of ``connection``'s engine."""
    return engine_of(connection).statements
