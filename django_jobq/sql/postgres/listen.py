"""PostgreSQL: the statements of a worker's LISTEN side, on its own psycopg connections rather than
Django's (PostgreSQL only: no other engine listens, so they are not part of the engine interface)."""

from .terms import IDLE_LOCK

# The idle lock (django_jobq/idle_lock.py), on the worker's own session connection. Taking it waits
# for every enqueue that took it shared (and so did not notify) to commit or roll back; enqueues that
# come after the request fail to take it shared and notify. A session lock: it lasts until released or
# until the connection ends, so a worker that dies never leaves it held.
IDLE_LOCK_TAKE = f"SELECT pg_advisory_lock({IDLE_LOCK})"
# Sent once the lock is held: every worker's lanes claim again, which finds the jobs of the enqueues
# the lock waited for (they committed without a notification). The payload is the listener's
# CLAIM_AGAIN (empty), which no queue name can be.
IDLE_LOCK_TAKEN = "SELECT pg_notify(%(channel)s, '')"
IDLE_LOCK_RELEASE = f"SELECT pg_advisory_unlock({IDLE_LOCK})"
# The lock's connection waits for the lock as long as it takes: no server-wide statement or lock
# timeout may cut the wait short (a direct connection of its own: a transaction pooler would hand
# these settings to other clients).
IDLE_LOCK_SESSION = (
    "SELECT set_config('statement_timeout', '0', false), set_config('lock_timeout', '0', false)"
)
