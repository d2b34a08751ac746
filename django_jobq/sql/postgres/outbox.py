"""The outbox's statements (django_jobq.managers.outbox): writing entries in the caller's
transaction, and relaying them exactly once (the ids are reserved with workflows.py's RESERVE_IDS:
nextval is never rolled back, so an id reserved by a transaction that rolled back is a gap)."""

from .enqueue import _COLUMNS, _WOKEN, window_over
from .terms import NOW, PENDING, WAITING

# outbox_write: the entries, in the caller's transaction (they commit or roll back with it).
OUTBOX_WRITE = """
INSERT INTO jobq_outbox (job_id, database, job, created_at)
SELECT u.job_id, u.database, u.job::jsonb, now()
FROM unnest(%(job_ids)s::bigint[], %(databases)s::text[], %(jobs)s::text[]) AS u(job_id, database, job)
RETURNING id
"""

# outbox_take: the entries a relay takes: those named (just committed by this process), and, for
# the backstop pass, those older than %(grace)s seconds (NULL: none). Locked SKIP LOCKED, so two
# relays never take one entry; the lock holds until the relay's transaction deletes them.
OUTBOX_TAKE = """
SELECT id, job_id, database, job, created_at FROM jobq_outbox
WHERE id = ANY(%(ids)s::bigint[])
   OR (%(grace)s::float8 IS NOT NULL AND created_at < now() - make_interval(secs => %(grace)s::float8))
ORDER BY id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

# outbox_done: the relayed entries go, in the relay's transaction on the outbox's database.
OUTBOX_DONE = """
DELETE FROM jobq_outbox WHERE id = ANY(%(ids)s::bigint[])
"""

# relay_jobs: the entries' jobs on their queue's database, under their reserved ids; the ids
# written come back. A job already there (a relay that committed here, then died before deleting its
# entries) conflicts on the primary key and is left alone: relayed twice, written once. A moved job
# (MOVE_TAKE) carries what it had: attempts, errors, snoozes, releases, progress, its dedupe key (with
# key_released) and creation time; a key's holder here whose window is over is freed first, as an
# enqueue frees it (the count from "freed" orders the insert after it), and a moved job whose key is
# still held here conflicts on jobq_job_dedupe and is left out (the caller logs it): the holder is
# its duplicate. ON CONFLICT DO NOTHING takes any unique conflict (one target cannot name both):
# jobq_job has these two unique indexes only, and one added later must be weighed here. Due jobs
# wake their queue.
RELAY_JOBS = f"""
WITH freed AS (
    UPDATE jobq_job AS h SET key_released = true
    WHERE h.dedupe_key = ANY(%(dedupe_keys)s::text[]) AND NOT h.key_released AND {window_over("h")}
    RETURNING h.id
), job AS (
    INSERT INTO jobq_job (id, {_COLUMNS}, last_error, key_released, snoozes, progress)
    SELECT u.id, u.task, u.queue, u.payload::jsonb, {PENDING}, u.priority, COALESCE(u.run_at, {NOW}),
           COALESCE(u.attempts, 0), u.max_attempts, 0, COALESCE(u.releases, 0), COALESCE(u.error_count, 0),
           u.dedupe_key, make_interval(secs => u.dedupe_done), make_interval(secs => u.dedupe_dead),
           u.concurrency_key, u.tags::jsonb, u.trace_context::jsonb, COALESCE(u.errors::jsonb, '[]'::jsonb),
           COALESCE(u.job_created_at, u.created_at), u.fairness_key, u.last_error,
           COALESCE(u.key_released, false), COALESCE(u.snoozes, 0), u.progress::jsonb
    FROM unnest(%(ids)s::bigint[], %(tasks)s::text[], %(queues)s::text[], %(payloads)s::text[],
                %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(max_attempts)s::int[],
                %(concurrency_keys)s::text[], %(tags)s::text[], %(trace_contexts)s::text[],
                %(fairness_keys)s::text[], %(created_ats)s::timestamptz[], %(attempts)s::int[],
                %(error_counts)s::int[], %(dedupe_keys)s::text[], %(dedupe_dones)s::float8[],
                %(dedupe_deads)s::float8[], %(errors)s::text[], %(job_created_ats)s::timestamptz[],
                %(last_errors)s::text[], %(key_releaseds)s::bool[], %(snoozes)s::int[],
                %(releases)s::int[], %(progresses)s::text[])
         AS u(id, task, queue, payload, priority, run_at, max_attempts, concurrency_key, tags,
              trace_context, fairness_key, created_at, attempts, error_count, dedupe_key, dedupe_done,
              dedupe_dead, errors, job_created_at, last_error, key_released, snoozes, releases, progress),
         (SELECT count(*) FROM freed) AS f
    ORDER BY u.id
    ON CONFLICT DO NOTHING
    RETURNING id, queue, run_at
), {_WOKEN}
"""

# move_take (jobq_queue move): a batch of a queue's PENDING jobs leaves this database, in the
# transaction that writes them to its outbox (their new ids reserved on the databases they go to),
# so each is relayed there exactly once (RELAY_JOBS). Locked SKIP LOCKED: a worker that claimed one
# first keeps it (it runs here), and a claim after the delete finds it gone. Jobs of a workflow,
# or that other jobs wait for, stay: their edges are this database's.
MOVE_TAKE = f"""
DELETE FROM jobq_job WHERE id IN (
    SELECT id FROM jobq_job
    WHERE queue = %(queue)s AND status = {PENDING} AND workflow_id IS NULL AND NOT has_dependents
      AND NOT awaited
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, task, queue, payload, priority, run_at, max_attempts, concurrency_key, tags, trace_context,
          fairness_key, attempts, error_count, dedupe_key, extract(epoch FROM dedupe_done),
          extract(epoch FROM dedupe_dead), errors, created_at, last_error, key_released, snoozes, releases,
          progress
"""

# move_left: the queue's jobs yet to run that stayed: (those that stay by rule: of a workflow,
# awaited by other jobs, or by a wait_for; the others: PENDING again since, or locked by a claim).
MOVE_LEFT = f"""
SELECT count(*) FILTER (WHERE status = {WAITING} OR workflow_id IS NOT NULL OR has_dependents OR awaited),
       count(*) FILTER (WHERE NOT (status = {WAITING} OR workflow_id IS NOT NULL OR has_dependents OR awaited))
FROM jobq_job WHERE queue = %(queue)s AND status IN ({PENDING}, {WAITING})
"""

# jobs_present: which of these ids are jobs of this database (a relay tells a job it wrote before
# from one it left out).
JOBS_PRESENT = """
SELECT id FROM jobq_job WHERE id = ANY(%(ids)s::bigint[])
"""

# move_forward: where the jobs of a move's batch went (old id -> new id), in the transaction that
# takes them off this database, so an old id is forwarded exactly when its job left.
MOVE_FORWARD = """
INSERT INTO jobq_moved (old_id, new_id)
SELECT * FROM unnest(%(old_ids)s::bigint[], %(new_ids)s::bigint[])
ON CONFLICT (old_id) DO NOTHING
"""

# moved_to: of the jobs %(ids)s, those moved off this database, each with the id it was given where it
# went (an id without a row was not moved). Read-only: the primary key's index.
MOVED_TO = "SELECT old_id, new_id FROM jobq_moved WHERE old_id = ANY(%(ids)s::bigint[])"
