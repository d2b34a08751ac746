"""PostgreSQL statements behind the admin dashboard and ``manage.py jobq_stats``.

Every figure reads an index whose size follows live work (the backlog, the running jobs, the dead
letters kept, the last hour of finished jobs), never the whole DONE history, so the page costs the same
with a million finished jobs as with ten. The one figure that would need the whole history, the number
of DONE jobs kept, is counted only while it is small and taken from the planner's statistics above
that (DONE_COUNT, DONE_ESTIMATE). All statements here are read-only, except DELETE_INACTIVE,
the admin's guarded delete.
"""

from .retention import _AUTOVACUUM_ON, _OLDEST_XACT
from .terms import CANCELLED, DEAD, DONE, NOW, PENDING, RUNNING, WAITING

# active: per queue, the PENDING, RUNNING, DEAD and WAITING jobs. Each arm repeats its partial index's
# predicate (status = …) so PostgreSQL reads jobq_job_claim, jobq_job_lease, jobq_job_dead and
# jobq_job_waiting respectively.
#   PENDING: jobs, those due now, and the run_at of the oldest due one (the lag), all in the claim
#            index (queue, priority, run_at, id), so an index-only scan.
#   RUNNING: jobs, those whose lease has expired (waiting for the reaper), and the earliest lease end.
#   DEAD:    jobs; index-only on (queue, task).
#   WAITING: jobs held for their dependencies (workflows); index-only on (queue).
ACTIVE = f"""
SELECT {PENDING} AS status, queue, count(*) AS jobs,
       count(*) FILTER (WHERE run_at <= {NOW}) AS flagged,
       min(run_at) FILTER (WHERE run_at <= {NOW}) AS oldest
FROM jobq_job WHERE status = {PENDING} GROUP BY queue
UNION ALL
SELECT {RUNNING}, queue, count(*), count(*) FILTER (WHERE lease_until < {NOW}), min(lease_until)
FROM jobq_job WHERE status = {RUNNING} GROUP BY queue
UNION ALL
SELECT {DEAD}, queue, count(*), 0, NULL
FROM jobq_job WHERE status = {DEAD} GROUP BY queue
UNION ALL
SELECT {WAITING}, queue, count(*), 0, NULL
FROM jobq_job WHERE status = {WAITING} GROUP BY queue
"""


# workflows: the %(limit)s most recent workflows (highest id) with an unfinished job, and their jobs per
# status. "recent" walks jobq_job_workflow (workflow_id, status) backwards, the status list checked in
# the index; the counts read the same index for those workflows only (index-only): the cost follows the
# jobs of the workflows shown, never the rest of the table.
WORKFLOWS = f"""
WITH recent AS (
    SELECT DISTINCT workflow_id FROM jobq_job
    WHERE workflow_id IS NOT NULL AND status IN ({PENDING}, {RUNNING}, {WAITING})
    ORDER BY workflow_id DESC
    LIMIT %(limit)s
)
SELECT r.workflow_id, w.name, w.created_at, j.status, count(*)
FROM recent AS r
JOIN jobq_job AS j ON j.workflow_id = r.workflow_id
LEFT JOIN jobq_workflow AS w ON w.id = r.workflow_id
GROUP BY r.workflow_id, w.name, w.created_at, j.status
ORDER BY r.workflow_id DESC, j.status
"""

# done_estimate: the database clock, the planner's estimate of the table's rows and, per queue, the
# share of rows that ANALYZE found in it (the most-common-values list of jobq_job.queue; lanes are few,
# so every queue is in it). The row estimate is what the planner itself uses: reltuples from the last
# ANALYZE/VACUUM scaled by the table's current size in pages. NULL rows: never analysed yet.
# Reads only the catalogue: constant cost. One row even when there are no statistics (queue NULL).
DONE_ESTIMATE = f"""
WITH t AS (
    SELECT c.oid, n.nspname,
           CASE WHEN c.reltuples >= 0 AND c.relpages > 0
                THEN c.reltuples / c.relpages
                     * (pg_relation_size(c.oid) / current_setting('block_size')::float8) END AS rows
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.oid = 'jobq_job'::regclass
)
SELECT {NOW} AS now, t.rows, v.queue, v.share
FROM t
LEFT JOIN pg_stats AS s
       ON s.schemaname = t.nspname AND s.tablename = 'jobq_job' AND s.attname = 'queue'
LEFT JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(queue, share) ON true
"""

# done_count: DONE jobs per queue, counted, reading at most %(limit)s of them (NULL: no limit, for
# jobq_stats --exact). When the limit is reached the caller uses DONE_ESTIMATE instead, so the count is
# exact for a small history and costs at most %(limit)s rows for a large one. status = DONE implies the
# predicate of jobq_job_finished (partial on DONE/DEAD, queue included), so the planner can count from
# that index alone instead of the table when finished jobs are few among many active ones.
DONE_COUNT = f"""
SELECT queue, count(*) FROM (
    SELECT queue FROM jobq_job WHERE status = {DONE} LIMIT %(limit)s
) AS done
GROUP BY queue
"""

# finished: jobs that reached DONE, DEAD or CANCELLED in the last hour, per queue, status and minute
# ("minutes ago", 0 = the last 60 seconds). The status list repeats the predicate of jobq_job_finished
# (partial on the three, led by finished_at), so PostgreSQL reads that index for the last hour only. At
# most queues x 3 x 60 rows come back; the 5- and 60-minute figures and the chart are sums of them.
FINISHED = f"""
SELECT queue, status, floor(extract(epoch FROM ({NOW} - finished_at)) / 60)::int AS ago, count(*)
FROM jobq_job
WHERE finished_at > {NOW} - interval '60 minutes' AND finished_at <= {NOW}
  AND status IN ({DONE}, {DEAD}, {CANCELLED})
GROUP BY queue, status, ago
"""

# running_by_task: RUNNING jobs per task (the lease index's rows: as many as jobs run), for the
# dashboard's task limits.
RUNNING_BY_TASK = f"SELECT task, count(*) FROM jobq_job WHERE status = {RUNNING} GROUP BY task"

# seats_held: per capped queue, its seats held now (unexpired): jobs of it that may run at once
# (MAX_RUNNING's seats, worker/seats.py). One row per seat of a capped queue. Read-only.
SEATS_HELD = f"SELECT queue, count(*) FROM jobq_cap_seat WHERE holder IS NOT NULL AND lease_until >= {NOW} GROUP BY queue"

# outbox: the jobs of this database's outbox not relayed to their queue's database yet, and when the
# oldest was written (NULL: none); read with JOBQ["SHARDS"] only (managers/outbox.py). Read-only.
OUTBOX = "SELECT count(*), min(created_at) FROM jobq_outbox"

# health: for the metrics' collector, one row: the workers alive (not stopped, a heartbeat within the
# last %(alive)s seconds: jobq_worker_seen), the seconds left on the reaper's lease (NULL: no reaper
# ever ran; negative: none holds it now), the sizes of jobq_job and of its indexes in bytes (read
# from the files' sizes: constant cost), and the age of the oldest transaction holding back vacuum
# (retention._OLDEST_XACT). Read-only.
HEALTH = f"""
SELECT (SELECT count(*) FROM jobq_worker
        WHERE last_seen_at > {NOW} - make_interval(secs => %(alive)s) AND stopped_at IS NULL),
       (SELECT extract(epoch FROM (expires_at - {NOW}))::float8 FROM jobq_lease WHERE name = 'reaper'),
       pg_table_size('jobq_job'::regclass), pg_indexes_size('jobq_job'::regclass), {_OLDEST_XACT}
"""

# table: jobq_job's upkeep for jobq_stats: its size and its indexes' in bytes (the files' sizes), the
# live and dead row versions the statistics collector counted, and when it was last vacuumed and
# analysed (by hand or by autovacuum), whether autovacuum reaches it at all (retention.AUTOVACUUM), and
# the age of the oldest transaction holding back vacuum (retention._OLDEST_XACT).
# Reads settings, the catalogue and the statistics views only: constant cost.
TABLE = f"""
SELECT pg_table_size(s.relid), pg_indexes_size(s.relid), s.n_live_tup, s.n_dead_tup,
       greatest(s.last_vacuum, s.last_autovacuum), greatest(s.last_analyze, s.last_autoanalyze),
       s.autovacuum_count, {_AUTOVACUUM_ON}, {_OLDEST_XACT}
FROM pg_stat_user_tables AS s
WHERE s.relid = 'jobq_job'::regclass
"""

# workers: the workers whose heartbeat was seen in the last %(recent)s seconds, newest first, at most
# %(limit)s (jobq_worker_seen index), with how long ago each was seen.
WORKERS = f"""
SELECT worker_id, hostname, pid, lanes, running, stuck, started_at, last_seen_at, stopped_at, supervisor,
       extract(epoch FROM ({NOW} - last_seen_at))::float8 AS silent_for
FROM jobq_worker
WHERE last_seen_at > {NOW} - make_interval(secs => %(recent)s)
ORDER BY last_seen_at DESC
LIMIT %(limit)s
"""

# filter_names: queue and task names for the admin's filters, from the partial indexes only (the
# backlog, the running jobs, the dead letters), never the DONE history; at most %(limit)s of them.
FILTER_NAMES = f"""
(SELECT 'queue', queue FROM jobq_job WHERE status = {PENDING}
 UNION SELECT 'queue', queue FROM jobq_job WHERE status = {RUNNING}
 UNION SELECT 'queue', queue FROM jobq_job WHERE status = {DEAD}
 UNION SELECT 'task', task FROM jobq_job WHERE status = {DEAD})
LIMIT %(limit)s
"""

# delete_inactive: the admin's delete. Deletes the named jobs whose status is one of %(statuses)s and
# never a RUNNING one, whatever the parameter says: a job a worker owns finishes or fails through its
# owner. In one statement, so a job claimed between the admin's page and this delete is re-checked on
# its new row version and kept. Rows are locked in id order and a row another statement holds is
# skipped (reported as not deleted), so the admin's delete never waits and never joins a deadlock
# with a worker's batched complete or a bulk requeue. Returns what it deleted, for the admin log.
DELETE_INACTIVE = f"""
WITH doomed AS MATERIALIZED (
    SELECT id FROM jobq_job
    WHERE id = ANY(%(ids)s::bigint[]) AND status = ANY(%(statuses)s::smallint[]) AND status <> {RUNNING}
    ORDER BY id
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobq_job
WHERE id = ANY(ARRAY(SELECT id FROM doomed)) AND status <> {RUNNING}
RETURNING id, task, status
"""

# paused: the paused queues (jobq_queue, one row per queue ever paused: a handful), with who paused each
# and when. Read-only.
PAUSED = """
SELECT name, changed_at, changed_by FROM jobq_queue WHERE paused ORDER BY name
"""

# queue_rows: every queue jobq_queue has a row for (paused once, or given a depth baseline: a handful),
# and whether it is paused now; for the metrics, which report every queue they know of. Read-only.
QUEUE_ROWS = "SELECT name, paused FROM jobq_queue"

# replica_lag: one row: whether this server is a standby (in recovery), and how far its replay is
# behind, in seconds: 0 while it has replayed all the WAL it received, else the age of the last
# transaction it replayed (an upper bound: the primary may have been idle before the change not yet
# replayed); NULL on a primary, or on a standby that has replayed no transaction yet. Calls functions
# only, reads no table: constant cost, and a standby answers it (read-only).
REPLICA_LAG = """
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
            ELSE greatest(0, extract(epoch FROM now() - pg_last_xact_replay_timestamp()))::float8 END
"""

# The exception class named by the last line of an error text (dashboard.ExceptionClass, a Func
# template): the last line (split_part with a negative index, PostgreSQL 14+), then what precedes its
# first colon.
EXCEPTION_CLASS = (
    r"left(btrim(split_part(split_part(rtrim(coalesce(%(expressions)s, ''), E' \t\r\n'), E'\n', -1),"
    r" ':', 1)), 200)"
)


# fair_keys: a fair queue's keys with the most due jobs (%(top)s of them) and each one's oldest due
# job. The due jobs are counted from the fair index (queue, fairness_key, ...; PENDING with a key),
# index-only, reading at most %(scan)s entries (partial: the counts are of those, a lower bound); the
# oldest is each lane's first entry of the key (one descent per lane of jobq_fair_key).
FAIR_KEYS = f"""
WITH due AS MATERIALIZED (
    SELECT fairness_key FROM jobq_job
    WHERE status = {PENDING} AND queue = %(queue)s AND fairness_key IS NOT NULL AND run_at <= {NOW}
    LIMIT %(scan)s
), top AS (
    SELECT fairness_key AS key, count(*) AS due FROM due
    GROUP BY fairness_key ORDER BY count(*) DESC, fairness_key LIMIT %(top)s
)
SELECT t.key, t.due, (
           SELECT min(o.run_at) FROM jobq_fair_key AS f CROSS JOIN LATERAL (
               SELECT j.run_at FROM jobq_job AS j
               WHERE j.status = {PENDING} AND j.queue = f.queue AND j.fairness_key = f.key
                 AND j.priority = f.priority
               ORDER BY j.run_at LIMIT 1) AS o
           WHERE f.queue = %(queue)s AND f.key = t.key) AS oldest,
       (SELECT count(*) FROM due) >= %(scan)s AS partial
FROM top AS t ORDER BY t.due DESC, t.key
"""
