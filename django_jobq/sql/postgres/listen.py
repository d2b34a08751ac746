"""PostgreSQL: the statements of a worker's LISTEN side, on its own psycopg connections rather than
Django's (PostgreSQL only: no other engine listens, so they are not part of the engine interface)."""

from .terms import IDLE_LOCK

# The idle lock (django_jobq/notify/idle_lock.py), on the worker's own session connection. Taking it
# waits for every enqueue that took it shared (and so did not notify) to commit or roll back; enqueues
# that come after the request fail to take it shared and notify. A session lock: it lasts until
# released or until the connection ends, so a worker that dies never leaves it held.
# A session waiting for a lock keeps its statement's snapshot all along, which holds back vacuum in
# the whole database. So a worker never waits behind another worker, whose hold lasts as long as its
# lanes are short of work (minutes, on a quiet queue): it asks without waiting (IDLE_LOCK_TRY), and
# waits (IDLE_LOCK_TAKE, bounded by IDLE_LOCK_WAIT) only behind enqueues in flight.
#
# idle_lock_try: 'taken' when the lock was free (now held); 'worker' when another session holds it or
# asks for it exclusively (a worker: enqueues notify anyway, and the caller asks again shortly);
# 'enqueues' when only enqueues in flight hold it shared (found by taking it shared for a moment: that
# succeeds only while no exclusive hold or request stands). The cases are tried in order (CASE), so
# the shared hold is released only where it was taken. Lock manager calls only: cheap to repeat.
IDLE_LOCK_TRY = f"""
SELECT CASE WHEN pg_try_advisory_lock({IDLE_LOCK}) THEN 'taken'
            WHEN NOT pg_try_advisory_lock_shared({IDLE_LOCK}) THEN 'worker'
            WHEN pg_advisory_unlock_shared({IDLE_LOCK}) THEN 'enqueues'
            ELSE 'enqueues' END
"""
# idle_lock_wait: run first in the transaction of IDLE_LOCK_TAKE, when only enqueues hold the lock: the
# wait lasts at most %(wait)s (another worker may ask between the two statements and be granted it
# first), and the caller asks again.
IDLE_LOCK_WAIT = "SELECT set_config('lock_timeout', %(wait)s, true)"
IDLE_LOCK_TAKE = f"SELECT pg_advisory_lock({IDLE_LOCK})"
# Sent once the lock is held: every worker's lanes claim again, which finds the jobs of the enqueues
# the lock waited for (they committed without a notification). The payload is the listener's
# CLAIM_AGAIN (empty), which no queue name can be.
IDLE_LOCK_TAKEN = "SELECT pg_notify(%(channel)s, '')"
IDLE_LOCK_RELEASE = f"SELECT pg_advisory_unlock({IDLE_LOCK})"
# The lock's connection sets its own timeouts: no server-wide statement or lock timeout may cut its
# waits short (a direct connection of its own: a transaction pooler would hand these settings to
# other clients).
IDLE_LOCK_SESSION = (
    "SELECT set_config('statement_timeout', '0', false), set_config('lock_timeout', '0', false)"
)
