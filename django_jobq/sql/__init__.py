"""Every statement django-jobq runs, one engine per database, the same names in each.

The PostgreSQL engine is one namespace gathered from modules split by concern: postgres (the job's
transitions and maintenance), postgres_enqueue (inserting jobs and the dedupe rule), postgres_depth
(MAX_DEPTH), postgres_pick (the claim's selection), postgres_inbound (first_seen), postgres_queues
(pause), postgres_workers (worker records, maintenance leases, timeouts), postgres_schedules
(the scheduler's passes and the settings sync). A name defined twice is an
error at import.
"""

from types import ModuleType, SimpleNamespace
from typing import Any

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
)


def _engine(*modules: ModuleType) -> Any:
    """The statements (upper-case names) of ``modules`` in one namespace."""
    names: dict[str, Any] = {}
    for module in modules:
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str):
                if name in names and names[name] is not value:
                    raise ImportError(f"statement {name} is defined twice ({module.__name__})")
                names[name] = value
    return SimpleNamespace(**names)


POSTGRES = _engine(
    postgres,
    postgres_depth,
    postgres_enqueue,
    postgres_inbound,
    postgres_queues,
    postgres_schedules,
    postgres_workers,
)


def statements_for(connection: BaseDatabaseWrapper) -> Any:
    """The statements of ``connection``'s engine."""
    if connection.vendor == "postgresql":
        return POSTGRES
    raise ConfigurationError(
        f"django-jobq needs PostgreSQL; database {connection.alias!r} is {connection.vendor}"
    )
