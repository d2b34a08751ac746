"""The engine-contract suite: every test here runs on PostgreSQL (tests.settings) and on SQLite
(``pytest --ds tests.settings.sqlite tests/contract``). Tests marked ``postgresql`` check what only
PostgreSQL has (query plans, processes racing on one server) and are skipped on SQLite, with the
marker's reason."""

import pytest
from django.db import connection


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = item.get_closest_marker("postgresql")
        if marker and connection.vendor != "postgresql":
            reason = marker.args[0] if marker.args else "PostgreSQL only"
            item.add_marker(pytest.mark.skip(reason=f"PostgreSQL only: {reason}"))
