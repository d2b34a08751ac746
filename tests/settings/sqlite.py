"""The test suite's settings on the SQLite engine: a database file in a temporary directory (the test
runner makes its own test_ copy of it), WAL, IMMEDIATE transactions."""

import os
import tempfile

from tests.settings import *  # noqa: F403

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("JOBQ_SQLITE_PATH", os.path.join(tempfile.gettempdir(), "jobq-tests.sqlite3")),
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        # A file, never Django's shared-cache in-memory default: threads race on it as processes would.
        "TEST": {"NAME": os.path.join(tempfile.gettempdir(), f"test-jobq-{os.getpid()}.sqlite3")},
    }
}
# The test app registers capped and rate-limited tasks for the PostgreSQL tests; on SQLite enqueueing
# them is refused (jobq.E009 names them), so the check is silenced here. models.W040: SQLite ignores
# the included column of one index (the index still serves).
SILENCED_SYSTEM_CHECKS = ["jobq.E009", "models.W040"]
