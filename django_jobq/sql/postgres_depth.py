"""PostgreSQL: backpressure, the MAX_DEPTH check of a queue (JOBQ["QUEUES"][q]["MAX_DEPTH"]).

An exact count of a queue's PENDING jobs costs as much as its depth, far too much for every enqueue.
Instead each enqueue into a capped queue checks an upper bound first:

    depth <= depth_count + (last id handed out now - depth_seq)

where depth_seq is the id sequence read before the reaper counted depth_count PENDING jobs (jobq_queue,
refreshed every pass). Every job inserted since has an id above depth_seq (so the bound counts it,
whatever its queue and whether it committed), and jobs claimed since only make the bound looser. When
the bound leaves room, enqueue goes ahead at the cost of one primary-key read; otherwise it counts the
queue's PENDING jobs exactly (at most MAX_DEPTH index entries, from the claim index). Either way
the check reads the caller's snapshot, so N producers enqueueing into the last free place at once
can all pass it: the depth exceeds MAX_DEPTH by at most the jobs those N concurrent calls insert (one
each for enqueue), and never grows further once they commit.
"""

from .postgres_terms import PENDING

# The last id the job table's id sequence handed out (0 before the first). The sequence is the one
# PostgreSQL names for jobq_job's identity column, resolved once when the statement is planned.
_LAST_ID = "COALESCE(pg_sequence_last_value('jobq_job_id_seq'::regclass), 0)"


def room(queue: str, n: str, limit: str) -> str:
    """A boolean expression: ``n`` more PENDING jobs fit in ``queue`` under ``limit`` (NULL: no limit).
    CASE evaluates its branches in order and each subquery only when reached, so the exact count runs
    only when the bound does not settle it."""
    return f"""(CASE
    WHEN {limit} IS NULL THEN true
    WHEN (SELECT s.depth_count + ({_LAST_ID} - s.depth_seq) FROM jobq_queue AS s
          WHERE s.name = {queue} AND s.depth_seq IS NOT NULL) + {n} <= {limit} THEN true
    ELSE (SELECT count(*) FROM (SELECT 1 FROM jobq_job WHERE status = {PENDING} AND queue = {queue}
                               LIMIT {limit}) AS d) + {n} <= {limit}
END)"""


# depth_full: of the (queue, jobs to add, limit) triples, the queues where they do not fit (for a
# batch, checked before its insert). Read-only.
DEPTH_FULL = f"""
SELECT q.name FROM unnest(%(queues)s::text[], %(counts)s::bigint[], %(limits)s::bigint[]) AS q(name, n, lim)
WHERE NOT {room("q.name", "q.n", "q.lim")}
"""

# depth_seq: the last id handed out, read before DEPTH_REFRESH counts in a statement of its own, so
# every job with an id up to it is either in that count or was still uncommitted when it ran.
DEPTH_SEQ = f"SELECT {_LAST_ID}"

# depth_refresh: record each capped queue's exact PENDING count with the sequence value read before.
# Only the reaper writes these rows; enqueue only reads them.
DEPTH_REFRESH = f"""
INSERT INTO jobq_queue (name, depth_count, depth_seq, depth_at)
SELECT q.name, (SELECT count(*) FROM jobq_job WHERE status = {PENDING} AND queue = q.name), %(seq)s, now()
FROM unnest(%(queues)s::text[]) AS q(name)
ON CONFLICT (name) DO UPDATE
SET depth_count = EXCLUDED.depth_count, depth_seq = EXCLUDED.depth_seq, depth_at = EXCLUDED.depth_at
"""
