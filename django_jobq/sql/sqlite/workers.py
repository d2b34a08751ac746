"""SQLite: worker heartbeats, the maintenance lease and session timeouts (sql/postgres/workers.py).
The single writer makes the upserts' "exactly one caller wins" hold without more."""

from .terms import NOW, plus

WORKER_BEAT = f"""
INSERT INTO jobq_worker (worker_id, hostname, pid, lanes, running, stuck, started_at, last_seen_at,
                         stopped_at, supervisor)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(lanes)s, %(running)s, %(stuck)s, {NOW}, {NOW},
        CASE WHEN %(stopped)s THEN {NOW} END, %(supervisor)s)
ON CONFLICT (worker_id) DO UPDATE
SET running = excluded.running, stuck = excluded.stuck, last_seen_at = excluded.last_seen_at,
    stopped_at = excluded.stopped_at, supervisor = excluded.supervisor
"""

PRUNE_WORKERS = f"DELETE FROM jobq_worker WHERE last_seen_at < {plus(NOW, '-%(age)s')}"

# lease_acquire: take the named maintenance lease (the reaper's) until now + %(seconds)s when it is
# free, expired, or ours already; a row back means we hold it. The lock row with an expiry replaces
# PostgreSQL's advisory locks.
LEASE_ACQUIRE = f"""
INSERT INTO jobq_lease (name, holder, expires_at)
VALUES (%(name)s, %(holder)s, {plus(NOW, "%(seconds)s")})
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE jobq_lease.holder = excluded.holder OR jobq_lease.expires_at < {NOW}
RETURNING holder
"""

LEASE_RELEASE = "DELETE FROM jobq_lease WHERE name = %(name)s AND holder = %(holder)s"

WORKER_IS_LIVE = f"""
SELECT 1 FROM jobq_worker
WHERE worker_id = %(worker_id)s AND stopped_at IS NULL AND last_seen_at > {plus(NOW, "-%(age)s")}
"""

# set_timeouts: SQLite has no statement timeout; the queue's connections get their busy timeout when
# they open (sqlite_setup), so this statement only checks the connection answers.
SET_TIMEOUTS = "SELECT %(statement_ms)s, %(lock_ms)s"
LOCAL_TIMEOUTS = "SELECT %(statement_ms)s, %(lock_ms)s"  # no row locks: nothing to bound
SET_CHANNELS = "SELECT %(channel)s, %(done_channel)s"  # no NOTIFY on SQLite
# No prepared plans kept across statements (SqliteEngine.replan_if_grown is the base's: never runs these).
TABLE_BYTES = "SELECT 0"
FORGET_PLANS = "SELECT 0"
