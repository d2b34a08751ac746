"""The engine-contract suite: every test here runs on PostgreSQL (tests.settings) and on SQLite
(``pytest --ds tests.settings_sqlite tests/contract``). Tests marked ``postgresql`` check what only
PostgreSQL has (query plans) and are skipped on SQLite."""

import pytest
from django.db import connection


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("postgresql") and connection.vendor != "postgresql":
            item.add_marker(pytest.mark.skip(reason="PostgreSQL only: plans and catalogue"))
