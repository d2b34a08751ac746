"""The outbox's statements (django_jobq.managers.outbox): writing entries in the caller's
transaction, and relaying them exactly once (the ids are reserved with workflows.py's RESERVE_IDS:
nextval is never rolled back, so an id reserved by a transaction that rolled back is a gap)."""

from .enqueue import _COLUMNS, _WOKEN
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

# relay_jobs: the entries' jobs on their queue's database, under their reserved ids. A job already
# there (a relay that committed here, then died before deleting its entries) conflicts on the
# primary key and is left alone: relayed twice, written once. A moved job (MOVE_TAKE) carries its
# attempts, errors, dedupe key and creation time; one whose key is held there conflicts on
# jobq_job_dedupe and is left out: the key's holder is that job's duplicate. Due jobs wake their queue.
RELAY_JOBS = f"""
WITH job AS (
    INSERT INTO jobq_job (id, {_COLUMNS}, last_error)
    SELECT u.id, u.task, u.queue, u.payload::jsonb, {PENDING}, u.priority, COALESCE(u.run_at, {NOW}),
           COALESCE(u.attempts, 0), u.max_attempts, 0, 0, COALESCE(u.error_count, 0), u.dedupe_key,
           make_interval(secs => u.dedupe_done), make_interval(secs => u.dedupe_dead),
           u.concurrency_key, u.tags::jsonb, u.trace_context::jsonb, COALESCE(u.errors::jsonb, '[]'::jsonb),
           COALESCE(u.job_created_at, u.created_at), u.fairness_key, u.last_error
    FROM unnest(%(ids)s::bigint[], %(tasks)s::text[], %(queues)s::text[], %(payloads)s::text[],
                %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(max_attempts)s::int[],
                %(concurrency_keys)s::text[], %(tags)s::text[], %(trace_contexts)s::text[],
                %(fairness_keys)s::text[], %(created_ats)s::timestamptz[], %(attempts)s::int[],
                %(error_counts)s::int[], %(dedupe_keys)s::text[], %(dedupe_dones)s::float8[],
                %(dedupe_deads)s::float8[], %(errors)s::text[], %(job_created_ats)s::timestamptz[],
                %(last_errors)s::text[])
         AS u(id, task, queue, payload, priority, run_at, max_attempts, concurrency_key, tags,
              trace_context, fairness_key, created_at, attempts, error_count, dedupe_key, dedupe_done,
              dedupe_dead, errors, job_created_at, last_error)
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
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, task, queue, payload, priority, run_at, max_attempts, concurrency_key, tags, trace_context,
          fairness_key, attempts, error_count, dedupe_key, extract(epoch FROM dedupe_done),
          extract(epoch FROM dedupe_dead), errors, created_at, last_error
"""

# move_left: the queue's jobs yet to run that stayed (PENDING or WAITING: in a workflow, or awaited
# by other jobs).
MOVE_LEFT = f"""
SELECT count(*) FROM jobq_job WHERE queue = %(queue)s AND status IN ({PENDING}, {WAITING})
"""
