"""Every statement django-jobq runs, one engine per database, the same names in each.

``engine_for(alias)`` is the engine of a database alias: its statements, its Capabilities
(sql/capabilities.py) and how they run (sql/engines.py). Nothing outside this package asks which
database it talks to.

The PostgreSQL statements are one namespace gathered from modules split by concern: postgres (the
job's transitions and maintenance), postgres_enqueue (inserting jobs and the dedupe rule),
postgres_depth (MAX_DEPTH), postgres_pick (the claim's selection), postgres_inbound (first_seen),
postgres_queues (pause), postgres_workers (worker records, maintenance leases, timeouts),
postgres_schedules (the scheduler's passes and the settings sync). The SQLite ones: sqlite
(transitions and maintenance), sqlite_enqueue, sqlite_state (workers, leases, queues, inbound
marks), sqlite_schedules. A name defined twice in one engine is an error at import; a name one engine has and the other
lacks is an error too.
"""

from types import ModuleType, SimpleNamespace
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..exceptions import ConfigurationError
from . import (
    postgres,
    postgres_depth,
    postgres_enqueue,
    postgres_inbound,
    postgres_queues,
    postgres_schedules,
    postgres_workers,
    sqlite,
    sqlite_enqueue,
    sqlite_schedules,
    sqlite_state,
    sqlite_stats,
    stats,
)
from .capabilities import POSTGRESQL, SQLITE, Capabilities
from .engines import Engine, Result, Script, Unsupported
from .postgres_engine import PostgresEngine
from .sqlite_engine import SqliteEngine

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
    postgres,
    postgres_depth,
    postgres_enqueue,
    postgres_inbound,
    postgres_queues,
    postgres_schedules,
    postgres_workers,
)
SQLITE_STATEMENTS = _statements(sqlite, sqlite_enqueue, sqlite_state, sqlite_schedules)

if _odd := set(vars(POSTGRES)) ^ set(vars(SQLITE_STATEMENTS)):
    raise ImportError(f"statements missing from one engine: {sorted(_odd)}")

# The dashboard's statements (read by the admin and jobq_stats), the same names in each engine.
POSTGRES_STATS = _statements(stats)
SQLITE_STATS = _statements(sqlite_stats)
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
