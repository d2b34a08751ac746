"""PostgreSQL: the statements of workflows (django_jobq.workflows): jobs enqueued with dependencies,
and a requeue's revival of the dependents a failure cancelled.

Settling is not here: a trigger (migration 0009) settles a job's dependents in the transaction that
finishes it, whichever statement does. These statements keep the two facts it relies on: a WAITING
job's waiting_on equals its unresolved edges, and a job with dependents has has_dependents set.
"""

from .terms import CANCELLED, DEAD, DONE, NOW, PENDING, WAITING, wake, wake_if_due

# flag_dependencies: the existing jobs named as dependencies, locked in id order (two enqueues naming
# the same jobs queue behind each other) and marked has_dependents, with their status as of the lock:
# the latest committed one. The row lock holds until the caller's transaction ends, so a statement
# finishing one of them either waits for that commit, and its trigger then sees the new edges, or
# finished first, and the status read here is final (its edge is written resolved). A claim skips
# the locked rows meanwhile, so a due PENDING one wakes workers (wake_if_due).
FLAG_DEPENDENCIES = f"""
WITH named AS MATERIALIZED (
    SELECT id FROM jobq_job WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR UPDATE
)
UPDATE jobq_job AS j SET has_dependents = true
WHERE j.id = ANY(ARRAY(SELECT id FROM named))
RETURNING j.id, j.status, {wake_if_due("j")}
"""

# reserve_ids: %(count)s ids from the job table's own sequence, in order: the nodes' ids are known
# before they are written, so the edges go in with them.
RESERVE_IDS = """
SELECT ARRAY(SELECT nextval((SELECT pg_get_serial_sequence('jobq_job', 'id')::regclass))
             FROM generate_series(1, %(count)s))
"""

# insert_workflow: the workflow's row; its id.
INSERT_WORKFLOW = f"""
INSERT INTO jobq_workflow (name, created_at) VALUES (%(name)s, {NOW}) RETURNING id
"""

# insert_nodes: a graph's jobs with their reserved ids, from parallel arrays sent in binary; a job with
# unresolved dependencies is WAITING (never claimed: the claim reads PENDING rows only), the others
# PENDING. One notification per distinct queue with a PENDING job due now (wake: only while a worker
# may be waiting), delivered on commit.
INSERT_NODES = f"""
WITH job AS (
    INSERT INTO jobq_job (id, task, queue, payload, status, priority, run_at, attempts, max_attempts,
                          fence, releases, error_count, concurrency_key, tags, trace_context, errors,
                          created_at, workflow_id, waiting_on, has_dependents, dependency_failure,
                          fairness_key)
    SELECT u.id, u.task, u.queue, u.payload::jsonb, CASE WHEN u.waiting_on > 0 THEN {WAITING} ELSE {PENDING} END,
           u.priority, COALESCE(u.run_at, {NOW}), 0, u.max_attempts, 0, 0, 0, u.concurrency_key,
           u.tags::jsonb, %(trace_context)s::jsonb, '[]'::jsonb, {NOW}, %(workflow_id)s::bigint,
           u.waiting_on, u.has_dependents, u.dependency_failure, u.fairness_key
    FROM unnest(%(ids)b::bigint[], %(tasks)b::text[], %(queues)b::text[], %(payloads)b::text[],
                %(priorities)b::smallint[], %(run_ats)b::timestamptz[], %(max_attempts)b::int[],
                %(concurrency_keys)b::text[], %(tags)b::text[], %(waiting_ons)b::int[],
                %(has_dependents)b::bool[], %(dependency_failures)b::text[], %(fairness_keys)b::text[])
         AS u(id, task, queue, payload, priority, run_at, max_attempts, concurrency_key, tags, waiting_on,
              has_dependents, dependency_failure, fairness_key)
    RETURNING id, queue, run_at, status
), woken AS (
    SELECT {wake("queue")} FROM (SELECT DISTINCT queue FROM job WHERE status = {PENDING} AND run_at <= {NOW}) AS q
)
SELECT count(*) FROM job, (SELECT count(*) FROM woken) AS w
"""

# insert_edges: the graph's edges (dependent, dependency, resolved: the dependency had already
# finished when it was flagged).
INSERT_EDGES = """
INSERT INTO jobq_dependency (dependent_id, dependency_id, resolved)
SELECT * FROM unnest(%(dependents)b::bigint[], %(dependencies)b::bigint[], %(resolved)b::bool[])
"""

# revive: run with a requeue, in its transaction, after it: the jobs that a dependency's failure
# cancelled (cancelled_by "dependency:<id>") and that depend on a requeued job (%(ids)s), and
# transitively theirs, wait again, unless one of their dependencies is DEAD or CANCELLED still (then
# they, and what waits on them, stay cancelled). Any failed dependency's requeue counts, not only the
# one whose failure cancelled them: of a group's two failed members, the one requeued last revives
# the callback, whichever failed first. A revived job waits for each dependency not DONE: its edges from those are unresolved
# again and waiting_on counts them, so the trigger settles it as it would have. The dependencies'
# rows are locked (FOR SHARE, reading their latest status) so none finishes unseen meanwhile.
REVIVE = f"""
WITH RECURSIVE candidates(id) AS (
    SELECT e.dependent_id FROM jobq_dependency AS e JOIN jobq_job AS w ON w.id = e.dependent_id
    WHERE e.dependency_id = ANY(%(ids)s::bigint[]) AND w.status = {CANCELLED}
      AND w.cancelled_by LIKE 'dependency:%%'
    UNION
    SELECT e.dependent_id FROM candidates AS c JOIN jobq_dependency AS e ON e.dependency_id = c.id
    JOIN jobq_job AS w ON w.id = e.dependent_id
    WHERE w.status = {CANCELLED} AND w.cancelled_by LIKE 'dependency:%%'
), deps AS MATERIALIZED (
    SELECT e.dependent_id, e.dependency_id, d.status FROM jobq_dependency AS e
    JOIN jobq_job AS d ON d.id = e.dependency_id
    WHERE e.dependent_id = ANY(ARRAY(SELECT id FROM candidates))
    FOR SHARE OF d
), blocked(id) AS (
    SELECT dependent_id FROM deps
    WHERE status IN ({DEAD}, {CANCELLED}) AND dependency_id <> ALL(%(ids)s::bigint[])
      AND dependency_id <> ALL(ARRAY(SELECT id FROM candidates))
    UNION
    SELECT e.dependent_id FROM blocked AS b JOIN jobq_dependency AS e ON e.dependency_id = b.id
    WHERE e.dependent_id = ANY(ARRAY(SELECT id FROM candidates))
), revived AS MATERIALIZED (
    SELECT id FROM candidates EXCEPT SELECT id FROM blocked
), edges AS (
    UPDATE jobq_dependency AS e SET resolved = (d.status = {DONE})
    FROM deps AS d
    WHERE e.dependent_id = ANY(ARRAY(SELECT id FROM revived))
      AND e.dependent_id = d.dependent_id AND e.dependency_id = d.dependency_id
    RETURNING e.dependent_id, e.resolved
)
UPDATE jobq_job AS j
SET status = {WAITING}, waiting_on = w.n, finished_at = NULL, last_error = NULL, cancelled_by = NULL,
    cancel_requested_at = NULL, key_released = false
FROM (SELECT dependent_id, count(*) FILTER (WHERE NOT resolved) AS n FROM edges GROUP BY dependent_id) AS w
WHERE j.id = w.dependent_id AND j.status = {CANCELLED}
RETURNING j.id
"""
