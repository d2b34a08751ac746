"""The outbox's statements (django_jobq.managers.outbox): writing entries in the caller's
transaction, and relaying them exactly once (the ids are reserved with workflows.py's RESERVE_IDS:
nextval is never rolled back, so an id reserved by a transaction that rolled back is a gap)."""

from .enqueue import _COLUMNS, _WOKEN
from .terms import NOW, PENDING

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
# primary key and is left alone: relayed twice, written once. Due jobs wake their queue.
RELAY_JOBS = f"""
WITH job AS (
    INSERT INTO jobq_job (id, {_COLUMNS})
    SELECT u.id, u.task, u.queue, u.payload::jsonb, {PENDING}, u.priority, COALESCE(u.run_at, {NOW}), 0,
           u.max_attempts, 0, 0, 0, NULL, NULL, NULL, u.concurrency_key, u.tags::jsonb,
           u.trace_context::jsonb, '[]'::jsonb, u.created_at, u.fairness_key
    FROM unnest(%(ids)s::bigint[], %(tasks)s::text[], %(queues)s::text[], %(payloads)s::text[],
                %(priorities)s::smallint[], %(run_ats)s::timestamptz[], %(max_attempts)s::int[],
                %(concurrency_keys)s::text[], %(tags)s::text[], %(trace_contexts)s::text[],
                %(fairness_keys)s::text[], %(created_ats)s::timestamptz[])
         AS u(id, task, queue, payload, priority, run_at, max_attempts, concurrency_key, tags,
              trace_context, fairness_key, created_at)
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue, run_at
), {_WOKEN}
"""
