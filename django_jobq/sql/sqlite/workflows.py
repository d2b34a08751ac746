"""SQLite: the statements of workflows, under the names of sql/postgres/workflows.py. The trigger
that settles a finished job's dependents is migration 0009's; every write here runs under the
database's one write lock, so no job finishes between a statement's read and its write."""

from ..engine import Script
from .terms import CANCELLED, DEAD, DONE, NOW, PENDING, WAITING

# flag_dependencies: the existing jobs named as dependencies, marked has_dependents, with their status.
FLAG_DEPENDENCIES = """
UPDATE jobq_job SET has_dependents = 1 WHERE id IN (SELECT value FROM json_each(%(ids)s))
RETURNING id, status
"""


# reserve_ids: %(count)s ids of the job table's AUTOINCREMENT sequence, as a JSON array (the manager
# reads either engine's answer as a list).
RESERVE_IDS = Script(
    (
        """INSERT INTO sqlite_sequence (name, seq)
SELECT 'jobq_job', COALESCE((SELECT max(id) FROM jobq_job), 0)
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'jobq_job')""",
        """UPDATE sqlite_sequence SET seq = seq + %(count)s WHERE name = 'jobq_job'
RETURNING (WITH RECURSIVE n(i) AS (SELECT seq - %(count)s + 1 UNION ALL SELECT i + 1 FROM n WHERE i < seq)
           SELECT json_group_array(i) FROM n)""",
    )
)

INSERT_WORKFLOW = f"INSERT INTO jobq_workflow (name, created_at) VALUES (%(name)s, {NOW}) RETURNING id"

_ARRAYS = ("ids", "tasks", "queues", "payloads", "priorities", "run_ats", "max_attempts", "concurrency_keys",
           "tags", "waiting_ons", "has_dependents", "dependency_failures", "fairness_keys")  # fmt: skip
_LISTS = "WITH " + ",\n".join(
    f"a{n} AS MATERIALIZED (SELECT key, value FROM json_each(%({name})s))" for n, name in enumerate(_ARRAYS)
)
_JOINS = "a0 " + " ".join(f"JOIN a{n} ON a{n}.key = a0.key" for n in range(1, len(_ARRAYS)))

# insert_nodes: a graph's jobs with their reserved ids; WAITING when they have unresolved dependencies.
INSERT_NODES = f"""{_LISTS}
INSERT INTO jobq_job (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, fence,
                      releases, error_count, concurrency_key, tags, trace_context, errors, created_at,
                      workflow_id, waiting_on, has_dependents, dependency_failure, fairness_key)
SELECT a0.value, a1.value, a2.value, a3.value, CASE WHEN a9.value > 0 THEN {WAITING} ELSE {PENDING} END,
       a4.value, COALESCE(a5.value, {NOW}), 0, a6.value, 0, 0, 0, a7.value, a8.value, %(trace_context)s,
       '[]', {NOW}, %(workflow_id)s, a9.value, a10.value, a11.value, a12.value
FROM {_JOINS} WHERE true ORDER BY a0.key
"""

INSERT_EDGES = """
INSERT INTO jobq_dependency (dependent_id, dependency_id, resolved)
SELECT d.value, json_extract(%(dependencies)s, '$[' || d.key || ']'),
       json_extract(%(resolved)s, '$[' || d.key || ']')
FROM json_each(%(dependents)s) AS d
"""

# revive: as on PostgreSQL, in steps: the revived jobs are gathered in the trigger's scratch table
# (empty outside a trigger), their edges re-resolved, the jobs set WAITING, the table emptied.
_REVIVED = f"""WITH RECURSIVE candidates(id) AS (
    SELECT e.dependent_id FROM jobq_dependency AS e JOIN jobq_job AS w ON w.id = e.dependent_id
    WHERE e.dependency_id IN (SELECT value FROM json_each(%(ids)s)) AND w.status = {CANCELLED}
      AND w.cancelled_by LIKE 'dependency:%%'
    UNION
    SELECT e.dependent_id FROM candidates AS c JOIN jobq_dependency AS e ON e.dependency_id = c.id
    JOIN jobq_job AS w ON w.id = e.dependent_id
    WHERE w.status = {CANCELLED} AND w.cancelled_by LIKE 'dependency:%%'
), blocked(id) AS (
    SELECT e.dependent_id FROM jobq_dependency AS e JOIN jobq_job AS d ON d.id = e.dependency_id
    WHERE e.dependent_id IN (SELECT id FROM candidates) AND d.status IN ({DEAD}, {CANCELLED})
      AND d.id NOT IN (SELECT value FROM json_each(%(ids)s)) AND d.id NOT IN (SELECT id FROM candidates)
    UNION
    SELECT e.dependent_id FROM blocked AS b JOIN jobq_dependency AS e ON e.dependency_id = b.id
    WHERE e.dependent_id IN (SELECT id FROM candidates)
)
INSERT INTO jobq_settling (id) SELECT id FROM candidates EXCEPT SELECT id FROM blocked"""
REVIVE = Script(
    (
        _REVIVED,
        f"""UPDATE jobq_dependency
SET resolved = (SELECT d.status FROM jobq_job AS d WHERE d.id = dependency_id) = {DONE}
WHERE dependent_id IN (SELECT id FROM jobq_settling)""",
        f"""UPDATE jobq_job
SET status = {WAITING}, finished_at = NULL, last_error = NULL, cancelled_by = NULL,
    cancel_requested_at = NULL, key_released = 0,
    waiting_on = (SELECT count(*) FROM jobq_dependency AS e WHERE e.dependent_id = jobq_job.id AND NOT e.resolved)
WHERE id IN (SELECT id FROM jobq_settling) AND status = {CANCELLED}
RETURNING id""",
        "DELETE FROM jobq_settling",
    ),
    lambda results: results[2],
)
