"""PostgreSQL: backpressure, the MAX_DEPTH check of a queue (JOBQ["QUEUES"][q]["MAX_DEPTH"]).

A queue's depth is its jobs waiting or running: PENDING and RUNNING. RUNNING counts because a worker
holds claimed jobs RUNNING before it starts them (a lane claims ahead of its slots, up to slots x
CLAIM_AHEAD), and the database cannot tell those from the started ones: counting PENDING only, every
job a worker holds would be room for one more, and the queue would hold MAX_DEPTH plus what the workers
hold. RUNNING jobs are few (at most every worker's slots and claimed-ahead jobs: the lease index's
rows), so counting them costs little.

An exact count of a queue's depth costs as much as its depth, too much for every enqueue into a deep
queue. So each enqueue into a capped queue checks an upper bound first:

    depth <= depth_count + (last id handed out now - depth_seq)

from the baseline the reaper records in jobq_queue every pass: depth_seq, the id sequence's last value,
and depth_count, the queue's jobs that are in the depth or may come back to it, counted after it:
PENDING, RUNNING and DEAD (requeued). A DONE job never comes back. So every job PENDING or RUNNING now
either has an id above depth_seq (counted by the difference, whatever its queue and whether it
committed) or was in depth_count (a job moves between PENDING and RUNNING, counted in both states, and
back from DEAD); jobs finished or deleted since only make the bound looser, and a baseline stays a bound
however old it is.

That holds only if the count sees every job of the queue with an id up to depth_seq: a job inserted by
a transaction still open at the count would be in neither term. The depth lock closes that gap. Every
enqueue into a capped queue takes it shared (gate(), in its statement, before its ids are drawn),
held until its transaction ends. The reaper takes it exclusive with a try and reads depth_seq after
it, in one statement that lets the lock go as it ends (DEPTH_SEQ: it never waits, and a producer waits
at most for that statement), then counts in the next. A producer of the queue that drew an id up to
depth_seq had ended before the reaper got the lock, so the count sees its jobs. A queue whose lock a
producer's open transaction holds keeps its previous baseline that pass.

When the bound leaves room, enqueue goes ahead at the cost of one primary-key read; otherwise it
counts the queue's PENDING jobs (at most MAX_DEPTH entries of the claim index) and RUNNING jobs (the
lease index's rows, whose queue is read from the table) exactly, in the caller's snapshot: exact for
sequential calls. N producers enqueueing into the last free places at once, or whose inserts are still
uncommitted, are not in each other's snapshot and can all pass: the depth exceeds MAX_DEPTH by at most
the jobs those concurrent calls insert (one each for enqueue), and stops there once they commit.
"""

from .terms import DEAD, PENDING, RUNNING

# The last id the job table's id sequence handed out (0 before the first). The sequence is the one
# PostgreSQL names for jobq_job's identity column, resolved once when the statement is planned.
_LAST_ID = "COALESCE(pg_sequence_last_value('jobq_job_id_seq'::regclass), 0)"


def _lock_key(queue: str) -> str:
    return f"hashtextextended('jobq.depth:' || {queue}, 0)"


def gate(queue: str) -> str:
    """A boolean expression, always false, that takes ``queue``'s depth lock shared until the
    transaction ends (waiting only while the reaper holds it, for one statement). Its first WHEN in a
    CASE takes the lock before the CASE reads anything else."""
    return f"pg_advisory_xact_lock_shared({_lock_key(queue)}) IS NULL"


def room(queue: str, n: str, limit: str) -> str:
    """A boolean expression: ``n`` more jobs fit in ``queue``'s depth (its PENDING and RUNNING jobs)
    under ``limit`` (NULL: no limit), the queue's depth lock taken. CASE evaluates its branches in
    order and each subquery only when reached, so the exact count runs only when the bound does not
    settle it."""
    return f"""(CASE
    WHEN {limit} IS NULL THEN true
    WHEN {gate(queue)} THEN false
    WHEN (SELECT s.depth_count + ({_LAST_ID} - s.depth_seq) FROM jobq_queue AS s
          WHERE s.name = {queue} AND s.depth_seq IS NOT NULL) + {n} <= {limit} THEN true
    ELSE (SELECT count(*) FROM (SELECT 1 FROM jobq_job WHERE status = {PENDING} AND queue = {queue}
                               LIMIT {limit}) AS d)
         + (SELECT count(*) FROM (SELECT 1 FROM jobq_job WHERE status = {RUNNING} AND queue = {queue}
                                 LIMIT {limit}) AS r) + {n} <= {limit}
END)"""


# depth_full: of the (queue, jobs to add, limit) triples, the queues where they do not fit (for a
# batch, checked before its insert, in the same transaction: the depth locks it takes cover the insert).
DEPTH_FULL = f"""
SELECT q.name FROM unnest(%(queues)s::text[], %(counts)s::bigint[], %(limits)s::bigint[]) AS q(name, n, lim)
WHERE NOT {room("q.name", "q.n", "q.lim")}
"""

# depth_seq: (queues, seq): of %(queues)s, those whose depth lock this statement took exclusive (a
# busy one, locked shared by a producer's open transaction, is left out, never waited for), then the
# last id handed out, read after the locks (the outer projection runs on the CTE's one row, so after
# it). Run on its own, outside a transaction: the locks end with the statement, so no client round trip
# (or a client that vanishes) ever holds producers up. Every job of those queues with an id up to seq is
# committed or rolled back by then.
DEPTH_SEQ = f"""
WITH locked AS MATERIALIZED (
    SELECT COALESCE(array_agg(q.name ORDER BY q.name), '{{}}') AS names FROM unnest(%(queues)s::text[]) AS q(name)
    WHERE pg_try_advisory_xact_lock({_lock_key("q.name")})
)
SELECT names, {_LAST_ID} FROM locked
"""

# depth_refresh: record each of DEPTH_SEQ's queues' count of PENDING, RUNNING and DEAD jobs (each
# from its partial index) with the sequence value DEPTH_SEQ read, in a later statement (whose snapshot
# sees every job with an id up to it). Only the reaper writes these columns; enqueue only reads them.
DEPTH_REFRESH = f"""
INSERT INTO jobq_queue (name, depth_count, depth_seq, depth_at)
SELECT q.name,
       (SELECT count(*) FROM jobq_job WHERE status = {PENDING} AND queue = q.name)
       + (SELECT count(*) FROM jobq_job WHERE status = {RUNNING} AND queue = q.name)
       + (SELECT count(*) FROM jobq_job WHERE status = {DEAD} AND queue = q.name),
       %(seq)s, now()
FROM unnest(%(queues)s::text[]) AS q(name)
ON CONFLICT (name) DO UPDATE
SET depth_count = EXCLUDED.depth_count, depth_seq = EXCLUDED.depth_seq, depth_at = EXCLUDED.depth_at
"""
