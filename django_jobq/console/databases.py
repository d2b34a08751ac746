"""Which of jobq's databases a console page shows (JOBQ["SHARDS"]): the query parameter that names
it, and the start of a link's query that keeps the next page on it (django_jobq.admin.databases is
the pages' side)."""

from __future__ import annotations

from ..conf import jobq_settings
from ..shards import working_database

PARAMETER = "database"  # the query parameter that names the database a page shows


def database_query() -> str:
    """``database=ALIAS&`` (the database this context works on) to begin a link's query with, so
    that the page it opens stays on it; "" without JOBQ["SHARDS"]."""
    return f"{PARAMETER}={working_database()}&" if jobq_settings().shards else ""
