"""SQLite: the statements behind the admin dashboard and ``manage.py jobq_stats`` (sql/postgres/stats.py has
the PostgreSQL ones, under the same names). Read-only, except DELETE_INACTIVE. SQLite keeps no
planner statistics of a table's rows, so DONE jobs are always counted (DONE_COUNT), up to the
caller's limit."""

from ..engine import Unsupported
from .terms import CANCELLED, DEAD, DONE, NOW, PENDING, RUNNING, WAITING, each, plus

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


# workflows: the %(limit)s most recent workflows with an unfinished job, and their jobs per status.
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

# done_estimate: the clock, and no estimate (one row of NULLs: the caller counts instead).
DONE_ESTIMATE = f"SELECT {NOW} AS now, NULL, NULL, NULL"

DONE_COUNT = f"""
SELECT queue, count(*) FROM (
    SELECT queue FROM jobq_job WHERE status = {DONE} LIMIT COALESCE(%(limit)s, -1)
) GROUP BY queue
"""

# finished: jobs that reached DONE, DEAD or CANCELLED in the last hour, per queue, status and minute ago.
FINISHED = f"""
SELECT queue, status, CAST((julianday({NOW}) - julianday(finished_at)) * 1440 AS INTEGER) AS ago, count(*)
FROM jobq_job
WHERE finished_at > {plus(NOW, "-3600")} AND finished_at <= {NOW} AND status IN ({DONE}, {DEAD}, {CANCELLED})
GROUP BY queue, status, ago
"""

RUNNING_BY_TASK = f"SELECT task, count(*) FROM jobq_job WHERE status = {RUNNING} GROUP BY task"
# no capped queues on SQLite: its seats table stays empty (sql/postgres/stats.py)
SEATS_HELD = f"SELECT queue, count(*) FROM jobq_cap_seat WHERE holder IS NOT NULL AND lease_until >= {NOW} GROUP BY queue"

# outbox: the jobs of this database's outbox not relayed to their queue's database yet, and when the
# oldest was written (NULL: none); read with JOBQ["SHARDS"] only (managers/outbox.py). Read-only.
OUTBOX = "SELECT count(*), min(created_at) FROM jobq_outbox"

# health: as PostgreSQL's, without the sizes and the oldest transaction (NULL).
HEALTH = f"""
SELECT (SELECT count(*) FROM jobq_worker
        WHERE last_seen_at > {plus(NOW, "-%(alive)s")} AND stopped_at IS NULL),
       (SELECT (julianday(expires_at) - julianday({NOW})) * 86400.0 FROM jobq_lease WHERE name = 'reaper'),
       NULL, NULL, NULL
"""

# table: no such figures (a SQLite database is one file, vacuumed by hand): jobq_stats leaves them out.
TABLE = Unsupported("table_figures", "jobq_job's size and dead rows")

WORKERS = f"""
SELECT worker_id, hostname, pid, lanes, running, stuck, started_at, last_seen_at, stopped_at, supervisor,
       (julianday({NOW}) - julianday(last_seen_at)) * 86400.0 AS silent_for
FROM jobq_worker
WHERE last_seen_at > {plus(NOW, "-%(recent)s")}
ORDER BY last_seen_at DESC
LIMIT %(limit)s
"""

FILTER_NAMES = f"""
SELECT kind, name FROM (
    SELECT 'queue' AS kind, queue AS name FROM jobq_job WHERE status = {PENDING}
    UNION SELECT 'queue', queue FROM jobq_job WHERE status = {RUNNING}
    UNION SELECT 'queue', queue FROM jobq_job WHERE status = {DEAD}
    UNION SELECT 'task', task FROM jobq_job WHERE status = {DEAD})
LIMIT %(limit)s
"""

# delete_inactive: the admin's delete; never a RUNNING job, whatever the parameter says.
DELETE_INACTIVE = f"""
DELETE FROM jobq_job
WHERE id IN {each("ids")} AND status IN {each("statuses")} AND status <> {RUNNING}
RETURNING id, task, status
"""

PAUSED = "SELECT name, changed_at, changed_by FROM jobq_queue WHERE paused ORDER BY name"

QUEUE_ROWS = "SELECT name, paused FROM jobq_queue"

# replica_lag: SQLite has no standby: never in recovery, no lag. Reads nothing.
REPLICA_LAG = "SELECT 0, NULL"

# The exception class named by the last line of an error text (dashboard.ExceptionClass), computed by
# a function django-jobq registers on the queue's SQLite connections (sqlite_setup).
EXCEPTION_CLASS = "jobq_exception_class(%(expressions)s)"

# fair_keys: as on PostgreSQL, a fair queue's keys with the most due jobs (%(top)s of them), counted
# from the fair index reading at most %(scan)s entries (partial: a lower bound), and each one's oldest
# PENDING job (text, as run_at is stored): one probe of the fair index per lane the key has in
# jobq_fair_key (found by reading the queue's rows there: their count is the queue's keys x lanes).
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
           SELECT min((SELECT j.run_at FROM jobq_job AS j
                       WHERE j.status = {PENDING} AND j.queue = f.queue AND j.fairness_key = f.key
                         AND j.priority = f.priority
                       ORDER BY j.run_at LIMIT 1))
           FROM jobq_fair_key AS f WHERE f.queue = %(queue)s AND f.key = t.key) AS oldest,
       (SELECT count(*) FROM due) >= %(scan)s AS partial
FROM top AS t ORDER BY t.due DESC, t.key
"""
