"""Every statement django-jobq runs, one module per database engine, the same names in each.

Only PostgreSQL exists today; an engine module for another database (S12) exports the same names.
"""

from types import ModuleType

from django.db.backends.base.base import BaseDatabaseWrapper

from ..exceptions import ConfigurationError
from . import postgres


def statements_for(connection: BaseDatabaseWrapper) -> ModuleType:
    """The statement module for ``connection``'s engine."""
    if connection.vendor == "postgresql":
        return postgres
    raise ConfigurationError(
        f"django-jobq needs PostgreSQL; database {connection.alias!r} is {connection.vendor}"
    )
