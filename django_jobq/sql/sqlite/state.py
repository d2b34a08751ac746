"""SQLite: workers, maintenance leases, queue state and inbound marks (sql/postgres/workers.py,
queues.py, inbound.py). Each is one statement: the single writer makes the upserts'
"exactly one caller wins" hold without more."""

from .terms import NOW, plus

WORKER_BEAT = f"""
INSERT INTO jobq_worker (worker_id, hostname, pid, lanes, running, stuck, started_at, last_seen_at,
                         stopped_at)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(lanes)s, %(running)s, %(stuck)s, {NOW}, {NOW},
        CASE WHEN %(stopped)s THEN {NOW} END)
ON CONFLICT (worker_id) DO UPDATE
SET running = excluded.running, stuck = excluded.stuck, last_seen_at = excluded.last_seen_at,
    stopped_at = excluded.stopped_at
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

# pause_queue / resume_queue: a row back only for the caller that changed the state (the manager
# wakes this process's workers on commit).
PAUSE_QUEUE = f"""
INSERT INTO jobq_queue (name, paused, changed_at, changed_by)
VALUES (%(name)s, 1, {NOW}, %(by)s)
ON CONFLICT (name) DO UPDATE
SET paused = 1, changed_at = excluded.changed_at, changed_by = excluded.changed_by
WHERE NOT jobq_queue.paused
RETURNING name, NULL
"""
RESUME_QUEUE = f"""
UPDATE jobq_queue SET paused = 0, changed_at = {NOW}, changed_by = %(by)s
WHERE name = %(name)s AND paused
RETURNING name, NULL
"""
PAUSED_QUEUES = "SELECT name FROM jobq_queue WHERE paused ORDER BY name"

# first_seen: take the mark of (namespace, key) for %(ttl)s seconds; a row back means first in window.
FIRST_SEEN = f"""
INSERT INTO jobq_inbound (namespace, key, seen_at, expires_at)
SELECT %(namespace)s, %(key)s, {NOW}, {plus(NOW, "%(ttl)s")}
WHERE NOT EXISTS (
    SELECT 1 FROM jobq_inbound
    WHERE namespace = %(namespace)s AND key = %(key)s AND expires_at > {NOW}
)
ON CONFLICT (namespace, key) DO UPDATE
SET seen_at = excluded.seen_at, expires_at = excluded.expires_at
WHERE jobq_inbound.expires_at <= excluded.seen_at
RETURNING 1
"""

PRUNE_MARKS = f"""
DELETE FROM jobq_inbound
WHERE rowid IN (SELECT rowid FROM jobq_inbound WHERE expires_at <= {NOW} ORDER BY expires_at LIMIT %(batch)s)
"""
