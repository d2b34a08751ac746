"""PostgreSQL: the statements about workers and maintenance roles rather than jobs: the worker's
record, the maintenance leases, the session's timeouts. Names exported by django_jobq.sql.postgres.jobs."""

from .terms import NOW

# worker_beat: upsert the worker's row (who is alive, what it runs). One row per worker process;
# only that process writes it, so there is no contention.
WORKER_BEAT = f"""
INSERT INTO jobq_worker (worker_id, hostname, pid, lanes, running, stuck, started_at, last_seen_at,
                         stopped_at, supervisor)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(lanes)s::jsonb, %(running)s, %(stuck)s::jsonb, {NOW}, {NOW},
        CASE WHEN %(stopped)s THEN {NOW} END, %(supervisor)s::jsonb)
ON CONFLICT (worker_id) DO UPDATE
SET running = EXCLUDED.running, stuck = EXCLUDED.stuck, last_seen_at = EXCLUDED.last_seen_at,
    stopped_at = EXCLUDED.stopped_at, supervisor = EXCLUDED.supervisor
"""

# prune_workers: forget workers not seen for a long time.
PRUNE_WORKERS = f"""
DELETE FROM jobq_worker WHERE last_seen_at < {NOW} - make_interval(secs => %(age)s)
"""

# lease_acquire: take the named maintenance lease (e.g. the reaper's) for %(holder)s until now +
# %(seconds)s, when nobody holds it, its holder let it expire, or we hold it already (a renewal).
# ON CONFLICT DO UPDATE locks the existing row and re-checks the WHERE on its latest version, so of
# concurrent takers exactly one gets a row back.
LEASE_ACQUIRE = f"""
INSERT INTO jobq_lease (name, holder, expires_at)
VALUES (%(name)s, %(holder)s, {NOW} + make_interval(secs => %(seconds)s))
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE jobq_lease.holder = EXCLUDED.holder OR jobq_lease.expires_at < {NOW}
RETURNING holder
"""

# lease_release: give the lease up at once (a clean stop), only if we still hold it.
LEASE_RELEASE = """
DELETE FROM jobq_lease WHERE name = %(name)s AND holder = %(holder)s
"""

# worker_is_live: another process recorded this worker id and has beaten within %(age)s seconds
# without stopping. Read-only.
WORKER_IS_LIVE = f"""
SELECT 1 FROM jobq_worker
WHERE worker_id = %(worker_id)s AND stopped_at IS NULL
  AND last_seen_at > {NOW} - make_interval(secs => %(age)s)
"""

# set_timeouts: bound every later statement on this session (the worker's and reaper's own
# connections only, never a task's): a hung statement or a long row-lock wait fails fast and is
# retried, instead of stalling a lane, the heartbeat or the reaper.
SET_TIMEOUTS = """
SELECT set_config('statement_timeout', %(statement_ms)s, false),
       set_config('lock_timeout', %(lock_ms)s, false)
"""

# table_bytes: jobq_job's size on disk (its partitions' with the partitioned layout), the length of
# its files: no lock, no row read. replan_if_grown compares it with the size its plans were made at.
TABLE_BYTES = """
SELECT pg_relation_size('jobq_job'::regclass) + coalesce((
    SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree('jobq_job'::regclass) WHERE isleaf AND level > 0
), 0)::bigint
"""

# forget_plans: drop this session's prepared statements (psycopg clears its own cache when it sees this
# command succeed): each is planned again, for the table as it is now, at its next use.
FORGET_PLANS = "DEALLOCATE ALL"

# local_timeouts: the same bounds for the current transaction only (SET LOCAL: gone at its end, so they
# hold behind a transaction-mode pooler too); '0' for none.
LOCAL_TIMEOUTS = """
SELECT set_config('statement_timeout', %(statement_ms)s, true),
       set_config('lock_timeout', %(lock_ms)s, true)
"""

# set_channels: the channels the workflow trigger (migration 0009) notifies from this session, the
# worker's and reaper's ('' for JOBQ["NOTIFY"] off); other sessions use the defaults.
SET_CHANNELS = """
SELECT set_config('jobq.channel', %(channel)s, false), set_config('jobq.done_channel', %(done_channel)s, false)
"""
