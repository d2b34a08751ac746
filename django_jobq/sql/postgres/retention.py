"""PostgreSQL statements that read or trim the whole table rather than one job: the exact counts per
status (the manager's counts()), retention's batched prune of finished jobs (the reaper's pass) and
whether autovacuum keeps the table. Every parameter is bound, never formatted in."""

from .enqueue import window_over
from .terms import CANCELLED, DEAD, DONE, NOW, PENDING, RUNNING, WAITING

# counts: jobs per status, exact. Each arm repeats its partial index's predicate (status = …), so it is
# counted from that index alone (an index-only scan where the visibility map allows): PENDING from
# jobq_job_claim, RUNNING from jobq_job_lease, DONE from jobq_job_finished (finished_at, status) and DEAD
# from jobq_job_dead, never from the table. Each arm's cost follows the rows of its status; the DONE arm
# reads the whole DONE part of jobq_job_finished (an exact count cannot do less), which is a fraction of
# the table's size. Read-only.
COUNTS = f"""
SELECT {PENDING}, count(*) FROM jobq_job WHERE status = {PENDING}
UNION ALL SELECT {RUNNING}, count(*) FROM jobq_job WHERE status = {RUNNING}
UNION ALL SELECT {DONE}, count(*) FROM jobq_job WHERE status = {DONE}
UNION ALL SELECT {DEAD}, count(*) FROM jobq_job WHERE status = {DEAD}
UNION ALL SELECT {CANCELLED}, count(*) FROM jobq_job WHERE status = {CANCELLED}
UNION ALL SELECT {WAITING}, count(*) FROM jobq_job WHERE status = {WAITING}
"""

# counts_queue: COUNTS for one queue. PENDING and DEAD are index-only ranges of their indexes (queue
# leads them); RUNNING filters the lease index's rows (as many as jobs run); DONE filters the DONE part
# of jobq_job_finished on its included queue column, index-only.
COUNTS_QUEUE = f"""
SELECT {PENDING}, count(*) FROM jobq_job WHERE status = {PENDING} AND queue = %(queue)s
UNION ALL SELECT {RUNNING}, count(*) FROM jobq_job WHERE status = {RUNNING} AND queue = %(queue)s
UNION ALL SELECT {DONE}, count(*) FROM jobq_job WHERE status = {DONE} AND queue = %(queue)s
UNION ALL SELECT {DEAD}, count(*) FROM jobq_job WHERE status = {DEAD} AND queue = %(queue)s
UNION ALL SELECT {CANCELLED}, count(*) FROM jobq_job WHERE status = {CANCELLED} AND queue = %(queue)s
UNION ALL SELECT {WAITING}, count(*) FROM jobq_job WHERE status = {WAITING} AND queue = %(queue)s
"""

# prune: delete up to %(batch)s finished jobs of one terminal status older than the retention, except
# a job still holding its dedupe key inside the key's window: that row outlives the retention until its
# window ends (deleting it would free the key early).
# The status guard repeats DONE/DEAD so that no parameter can ever make it delete an active job.
# The batch is picked (and locked, skipping rows a concurrent prune holds) from jobq_job_finished
# (finished_at, status), where the old rows are one range whose status is checked in the index without
# visiting the table (oldest first: the order keeps every plan, generic ones too, on that index), and
# the DELETE finds them by primary key (id = ANY(ARRAY(...)), an init plan): "id IN (subquery)" would
# let the planner hash-join the batch against a scan of the whole table.
# Workflows: a job is kept while a job that depends on it is unfinished (its result is read by that
# job), and a workflow's jobs are kept while any of them is unfinished (jobq_job_workflow answers), so
# its rows go together; the edges into a deleted job (one that had dependencies) go with it. Both
# checks are skipped for the jobs outside workflows (has_dependents false, workflow_id NULL). Each is a
# scalar subquery with LIMIT 1, looked up per candidate on its index: "NOT EXISTS" under an OR lets the
# planner hash every active job once instead (a scan of the backlog).
_ACTIVE = f"{PENDING}, {RUNNING}, {WAITING}"
PRUNE = f"""
WITH gone AS (
    DELETE FROM jobq_job
    WHERE id = ANY(ARRAY(
        SELECT id FROM jobq_job
        WHERE status = %(status)s AND status IN ({DONE}, {DEAD}, {CANCELLED})
          AND finished_at < {NOW} - make_interval(secs => %(age)s)
          AND (dedupe_key IS NULL OR key_released OR {window_over("jobq_job")})
          AND (NOT has_dependents OR (
                SELECT e.dependent_id FROM jobq_dependency AS e JOIN jobq_job AS w ON w.id = e.dependent_id
                WHERE e.dependency_id = jobq_job.id AND w.status IN ({_ACTIVE}) LIMIT 1) IS NULL)
          AND (workflow_id IS NULL OR (
                SELECT w.id FROM jobq_job AS w
                WHERE w.workflow_id = jobq_job.workflow_id AND w.status IN ({_ACTIVE}) LIMIT 1) IS NULL)
        ORDER BY finished_at
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    )) AND status IN ({DONE}, {DEAD}, {CANCELLED})
    RETURNING id, dependency_failure IS NOT NULL AS waited
), edges AS (
    DELETE FROM jobq_dependency WHERE dependent_id = ANY(ARRAY(SELECT id FROM gone WHERE waited))
)
SELECT count(*) FROM gone
"""

# autovacuum: does autovacuum vacuum jobq_job? Only while the server runs it (autovacuum, and
# track_counts, which it needs) and the table does not opt out (autovacuum_enabled among its storage
# options). Off, nothing removes the dead rows each job leaves: migration 0008's per-table settings do
# nothing. Reads settings and the catalogue only; the dashboard's TABLE reads the same condition.
_AUTOVACUUM_ON = """(current_setting('autovacuum')::bool AND current_setting('track_counts')::bool
    AND coalesce((SELECT o.option_value::bool FROM pg_class AS c, pg_options_to_table(c.reloptions) AS o
                  WHERE c.oid = 'jobq_job'::regclass AND o.option_name = 'autovacuum_enabled'), true))"""
AUTOVACUUM = f"SELECT {_AUTOVACUUM_ON}"

# The age in seconds of the oldest transaction on this database that holds a snapshot or an xid (NULL:
# none but this one). While it stays open, no vacuum removes the row versions that died after it
# began, anywhere in the database, and every claim walks past those of jobq_job's claim index: claims
# slow down in step with the jobs run since. Other roles' sessions count only where this role may see
# them (a superuser, or a member of pg_read_all_stats). Reads the activity statistics only.
# The function behind pg_stat_activity, read without the view's joins (its sessions' names and roles).
_OLDEST_XACT = """(SELECT extract(epoch FROM (clock_timestamp() - min(a.xact_start)))::float8
    FROM pg_stat_get_activity(NULL) AS a
    WHERE a.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND a.pid <> pg_backend_pid() AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL))"""
