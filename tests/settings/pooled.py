"""Test settings with the queue behind a PgBouncer in transaction mode (worker subprocesses of
tests/integration/test_pgbouncer.py): "default" goes through the pooler at JOBQ_POOLER_URL,
"direct" is DATABASE_URL itself; LISTEN uses "direct" unless JOBQ_NOTIFY is "0" (poll only)."""

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, JOBQ, env

DATABASES = {
    "default": {**env.db("JOBQ_POOLER_URL"), "DISABLE_SERVER_SIDE_CURSORS": True},
    "direct": DATABASES["default"],
}
_notify = env.bool("JOBQ_NOTIFY", default=True)
JOBQ = {
    **JOBQ,
    "POOL_MODE": "transaction",
    "NOTIFY": _notify,
    "LISTEN_DATABASE": env("JOBQ_LISTEN_DATABASE", default="direct") if _notify else None,
}
