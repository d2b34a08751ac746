"""PostgreSQL statements. Each runs as one statement (atomic on its own, or part of the caller's
transaction) and every parameter is bound, never formatted in.

Time: every comparison uses NOW, the database clock, unless the caller binds %(now)s (the "python"
clock of JOBQ["CLOCK"], used by tests that move time with time-machine).

Transitions out of RUNNING are compare-and-set: they name the job id, require status RUNNING, the
owner's worker_id and the attempt number (the fencing token) and report success through RETURNING.
Under READ COMMITTED an UPDATE that finds its row changed by a concurrent commit re-checks its WHERE on
the new row version, so a second writer whose guard no longer holds changes nothing.
"""

NOW = "COALESCE(%(now)s::timestamptz, now())"

PENDING, RUNNING, DONE, DEAD = 0, 1, 2, 3

_ACTIVE = f"status IN ({PENDING}, {RUNNING})"
# The dedupe constraint's predicate, repeated in ON CONFLICT so PostgreSQL infers that partial index.
_DEDUPE = f"dedupe_key IS NOT NULL AND {_ACTIVE}"

# enqueue: insert one job. A concurrent insert of the same active dedupe_key waits for the first
# transaction; if that commits, ON CONFLICT DO NOTHING returns no row (a duplicate), if it rolls back,
# this insert proceeds. pg_notify is queued in the caller's transaction and delivered on commit only,
# so a rolled-back enqueue wakes nobody. The payload is only the queue name (identical notifications
# in one transaction are folded into one).
ENQUEUE = f"""
WITH job AS (
    INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                          dedupe_key, errors, created_at)
    VALUES (%(task)s, %(queue)s, %(payload)s::jsonb, {PENDING}, %(priority)s,
            COALESCE(%(run_at)s::timestamptz, {NOW}) + make_interval(secs => %(delay)s), 0,
            %(max_attempts)s, %(dedupe_key)s, '[]'::jsonb, {NOW})
    ON CONFLICT (dedupe_key) WHERE {_DEDUPE} DO NOTHING
    RETURNING id, queue
)
SELECT id, CASE WHEN %(notify)s THEN pg_notify(%(channel)s, queue) END FROM job
"""

# enqueue_many: the same insert for many jobs from parallel arrays, sent in binary (one round trip, no
# per-element quoting). Duplicates,
# against active jobs or within the batch, are skipped by ON CONFLICT DO NOTHING. One notification
# per distinct queue.
ENQUEUE_MANY = f"""
WITH job AS (
    INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                          dedupe_key, errors, created_at)
    SELECT u.task, u.queue, u.payload::jsonb, {PENDING}, u.priority,
           COALESCE(u.run_at, {NOW}), 0, u.max_attempts, u.dedupe_key, '[]'::jsonb, {NOW}
    FROM unnest(%(tasks)b::text[], %(queues)b::text[], %(payloads)b::text[], %(priorities)b::smallint[],
                %(run_ats)b::timestamptz[], %(max_attempts)b::int[], %(dedupe_keys)b::text[])
         AS u(task, queue, payload, priority, run_at, max_attempts, dedupe_key)
    ON CONFLICT (dedupe_key) WHERE {_DEDUPE} DO NOTHING
    RETURNING id, queue
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM job) AS q WHERE %(notify)s
)
SELECT id FROM job, (SELECT count(*) FROM woken) AS w
"""

# claim: pick up to %(limit)s due PENDING jobs and make them RUNNING for this worker, in one statement.
# The selection locks its rows FOR UPDATE SKIP LOCKED, so concurrent claimers never wait for or take the
# same row, and sits in a MATERIALIZED CTE: an optimisation fence the planner cannot inline or re-run,
# so the UPDATE touches exactly the rows selected and never more than the limit. Order: lowest priority
# value first, then run_at, then id, across every queue the claim names. The UPDATE finds the picked
# rows by primary key (id = ANY(ARRAY(...)), an init plan), never by a join whose plan could scan the
# table: the statement is prepared, and a generic plan must not depend on the limit's value.
# attempts += 1 makes the new attempt number the fencing token for every later write by this owner.
#
# The selection walks the partial claim index (status PENDING: queue, priority, run_at, id) rather than
# range-scanning it: priority comes before run_at in that index, so "run_at <= now" cannot bound a
# range of it, and a plain scan steps over every future job (delayed, or waiting out a retry backoff)
# filed under a lower priority value; a claim over several queues cannot use the index order at all
# and sorts the whole due backlog. Instead, per queue (_due):
#   lanes: the queue's distinct priority values, lowest first, one index descent each (a recursive skip
#          scan). A recursive CTE is evaluated only as far as its reader pulls, so the walk stops at the
#          lane that fills the limit.
#   due:   per lane, the due jobs are one contiguous index range (queue, priority = p, run_at <= now),
#          read in (run_at, id) order and locked as they are read: a claimer skips the rows another one
#          holds and reads on, and the Limit above stops reading, and locking, at %(limit)s rows.
# The rows come out in claim order without a sort (the walk yields its lanes in ascending order, one
# iteration at a time, and a nested loop keeps the order of its outer side), so nothing stands between
# the lock and the limit that would read ahead. After _WALK lanes, the rest of the queue (priority >=
# the last lane's) is read as one plain index range: thousands of distinct priority values cost at most
# _WALK descents more than the plain scan.
_WALK = 32

# How the planner is shown the limit, the list of queues and "due": the limit and the list as init plans
# (never constants), and due as a closed range of run_at. So a custom plan is costed as the generic plan
# is, and PostgreSQL settles on the generic plan after a few executions instead of planning these
# statements again on every claim; and the generic plan's estimate of the rows due stays small (the
# default selectivity of a range, not of an open inequality), so its cost does not grow with the
# backlog towards the JIT thresholds. Neither changes the plan's shape, which the lateral joins fix.
_LIMIT = "(SELECT %(limit)s::int)"
_DUE_NOW = f"run_at >= '-infinity' AND run_at <= (SELECT {NOW})"


def _due(queue: str, gate: str = "") -> str:
    """The due jobs of one queue (an expression: a parameter, or an outer column), claim order, locked,
    at most %(limit)s; none unless ``gate`` (a condition on outer columns) holds. Columns id, priority,
    run_at."""
    gate = f" AND {gate}" if gate else ""
    return f"""WITH RECURSIVE lanes(priority, depth) AS (
        (SELECT priority, 1 FROM jobq_job WHERE status = {PENDING} AND queue = {queue}{gate}
         ORDER BY priority LIMIT 1)
        UNION ALL
        SELECT (SELECT n.priority FROM jobq_job AS n
                WHERE n.status = {PENDING} AND n.queue = {queue} AND n.priority > l.priority
                ORDER BY n.priority LIMIT 1),
               l.depth + 1
        FROM lanes AS l WHERE l.priority IS NOT NULL AND l.depth < {_WALK}
    )
    SELECT due.id, due.priority, due.run_at FROM lanes AS l CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT id, priority, run_at FROM jobq_job
            WHERE status = {PENDING} AND queue = {queue} AND priority = l.priority AND {_DUE_NOW}
              AND l.depth < {_WALK}
            ORDER BY run_at, id LIMIT {_LIMIT} FOR UPDATE SKIP LOCKED) AS lane
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, run_at FROM jobq_job
            WHERE status = {PENDING} AND queue = {queue} AND priority >= l.priority AND {_DUE_NOW}
              AND l.depth = {_WALK}
            ORDER BY priority, run_at, id LIMIT {_LIMIT} FOR UPDATE SKIP LOCKED) AS rest
    ) AS due
    LIMIT {_LIMIT}"""


# One queue: its walk, as it comes.
_PICK_ONE = f"picked AS MATERIALIZED (\n    {_due('%(queue)s')}\n)"

# Several queues: each queue's walk (at most %(limit)s rows each), merged by (priority, run_at, id).
# The merge is a sort, which reads all its input before the limit applies, so each queue locks up to
# %(limit)s rows and the claim takes the best %(limit)s of them. That is the one relaxation of the
# order: until the claim commits, the rows it locked but did not take are skipped by a claim running
# at the same moment, which may take a job ranked after them. Sequential claims see the strict order.
_PICK_QUEUES = f"""picked AS MATERIALIZED (
    SELECT due.id FROM (SELECT DISTINCT name FROM unnest((SELECT %(queues)s::text[])) AS u(name)) AS q
    CROSS JOIN LATERAL ({_due("q.name")}) AS due
    ORDER BY due.priority, due.run_at, due.id
    LIMIT {_LIMIT}
)"""

# Every queue: the queues that have PENDING jobs, found by a skip scan of the claim index (one descent
# each), then as for several queues. After _WALK queues the walk stops and the rest (queue >= the last
# one found) is read in plain index order, (queue, priority, run_at, id), without a sort: so when more
# than _WALK queues hold PENDING jobs, the first _WALK - 1 queues (by name) are walked, the rest are
# served in queue-name order, and the merge takes the best of both; with _WALK queues or fewer the
# order is strict. Thousands of queues cost at most _WALK walks (and lock at most _WALK times
# %(limit)s rows), and no plan sorts the backlog.
_PICK_ANY = f"""picked AS MATERIALIZED (
    WITH RECURSIVE queues(name, depth) AS (
        (SELECT queue, 1 FROM jobq_job WHERE status = {PENDING} ORDER BY queue LIMIT 1)
        UNION ALL
        SELECT (SELECT n.queue FROM jobq_job AS n WHERE n.status = {PENDING} AND n.queue > q.name
                ORDER BY n.queue LIMIT 1),
               q.depth + 1
        FROM queues AS q WHERE q.name IS NOT NULL AND q.depth < {_WALK}
    )
    SELECT due.id FROM queues AS q CROSS JOIN LATERAL (
        SELECT * FROM ({_due("q.name", f"q.depth < {_WALK}")}) AS one
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, run_at FROM jobq_job
            WHERE status = {PENDING} AND queue >= q.name AND {_DUE_NOW} AND q.depth = {_WALK}
            ORDER BY queue, priority, run_at, id LIMIT {_LIMIT} FOR UPDATE SKIP LOCKED) AS rest
    ) AS due
    ORDER BY due.priority, due.run_at, due.id
    LIMIT {_LIMIT}
)"""
_TAKE = f"""UPDATE jobq_job AS j
SET status = {RUNNING}, worker_id = %(worker_id)s, attempts = j.attempts + 1,
    started_at = {NOW}, lease_until = {NOW} + make_interval(secs => %(lease)s)
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING j.*"""
CLAIM_ANY_QUEUE = f"WITH {_PICK_ANY}\n{_TAKE}"
CLAIM_ONE_QUEUE = f"WITH {_PICK_ONE}\n{_TAKE}"
CLAIM_QUEUES = f"WITH {_PICK_QUEUES}\n{_TAKE}"

# Owned by the caller: RUNNING under its worker_id (the attempt is checked by each statement).
_OWNED = f"status = {RUNNING} AND worker_id = %(worker_id)s"
_J_OWNED = f"j.status = {RUNNING} AND j.worker_id = %(worker_id)s"

# complete: RUNNING -> DONE, only by the owner of this very attempt.
COMPLETE = f"""
UPDATE jobq_job
SET status = {DONE}, result = %(result)s::jsonb, finished_at = {NOW}, lease_until = NULL
WHERE id = %(id)s AND {_OWNED} AND attempts = COALESCE(%(attempt)s, attempts)
RETURNING id
"""

# complete_many: COMPLETE for a batch of (id, attempt, result) in one statement; rows whose guard
# fails are simply not returned. (id = ANY(ids) keeps every plan, generic ones too, on the primary key;
# the same holds for HEARTBEAT and RELEASE.)
COMPLETE_MANY = f"""UPDATE jobq_job AS j
SET status = {DONE}, result = d.result::jsonb, finished_at = {NOW}, lease_until = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(results)s::text[]) AS d(id, attempt, result)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = d.id AND {_J_OWNED} AND j.attempts = d.attempt
RETURNING j.id"""

_GIVE_UP = "(%(permanent)s OR attempts >= max_attempts)"

# fail: RUNNING -> PENDING (retry at now + backoff) or DEAD (permanent, or attempts exhausted), only by
# the owner of this attempt. Without an explicit backoff the delay is full jitter below the ceiling of
# django_jobq.backoff.compute_backoff: random() * least(cap, base * 2^(attempts-1)). The error is kept
# in last_error and appended to the per-attempt history.
FAIL = f"""
UPDATE jobq_job
SET status = CASE WHEN {_GIVE_UP} THEN {DEAD} ELSE {PENDING} END,
    run_at = CASE WHEN {_GIVE_UP} THEN run_at ELSE {NOW} + make_interval(secs => COALESCE(
        %(backoff)s, random() * LEAST(%(cap)s, %(base)s * power(2, LEAST(attempts - 1, 64))))) END,
    finished_at = CASE WHEN {_GIVE_UP} THEN {NOW} END,
    worker_id = CASE WHEN {_GIVE_UP} THEN worker_id END,
    lease_until = NULL,
    last_error = %(error)s,
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempts, 'at', {NOW}, 'worker', worker_id, 'error', %(error)s::text))
WHERE id = %(id)s AND {_OWNED} AND attempts = COALESCE(%(attempt)s, attempts)
RETURNING status
"""

# renew_lease: push one owned job's lease forward.
RENEW_LEASE = f"""
UPDATE jobq_job SET lease_until = {NOW} + make_interval(secs => %(lease)s)
WHERE id = %(id)s AND {_OWNED} AND attempts = COALESCE(%(attempt)s, attempts)
RETURNING id
"""

# heartbeat: renew every lease the worker holds, in one statement. Only the ids the worker is running
# are named, so a job it lost track of (e.g. a claim whose reply was lost) is left to expire.
HEARTBEAT = f"""
UPDATE jobq_job AS j SET lease_until = {NOW} + make_interval(secs => %(lease)s)
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS h(id, attempt)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = h.id AND {_J_OWNED} AND j.attempts = h.attempt
RETURNING j.id
"""

# release: RUNNING -> PENDING at once, for jobs a stopping worker could not finish in its grace period.
# attempts stays (it is the fencing token) and max_attempts grows by one, so a shutdown does not use
# up the job's retry budget.
RELEASE = f"""
UPDATE jobq_job AS j
SET status = {PENDING}, worker_id = NULL, lease_until = NULL, run_at = {NOW},
    max_attempts = j.max_attempts + 1,
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempts, 'at', {NOW}, 'worker', j.worker_id, 'error', 'released: worker shut down'))
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS r(id, attempt)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = r.id AND {_J_OWNED} AND j.attempts = r.attempt
RETURNING j.id
"""

# reap: every RUNNING job whose lease expired goes back to PENDING, or to DEAD when it has used all
# its attempts, in one statement (the whole backlog at once). A concurrent heartbeat that committed
# first makes the re-checked WHERE false, so a live job is never taken.
REAP = f"""
UPDATE jobq_job
SET status = CASE WHEN attempts >= max_attempts THEN {DEAD} ELSE {PENDING} END,
    finished_at = CASE WHEN attempts >= max_attempts THEN {NOW} END,
    worker_id = CASE WHEN attempts >= max_attempts THEN worker_id END,
    run_at = {NOW}, lease_until = NULL,
    last_error = 'lease expired: worker ' || coalesce(worker_id, '?') || ' stopped renewing it',
    errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempts, 'at', {NOW},
        'worker', worker_id, 'error', 'lease expired: worker stopped renewing it'))
WHERE status = {RUNNING} AND lease_until < {NOW}
RETURNING id
"""

# requeue: DEAD -> PENDING with attempts reset; the error history is kept. Refused (no row) while
# another active job holds the same dedupe_key; the unique index still guards the race between that
# check and the update, which the caller turns into a refusal.
REQUEUE = f"""
UPDATE jobq_job AS j
SET status = {PENDING}, attempts = 0, run_at = COALESCE(%(run_at)s::timestamptz, {NOW}),
    priority = COALESCE(%(priority)s, j.priority), worker_id = NULL, lease_until = NULL,
    started_at = NULL, finished_at = NULL, result = NULL
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status = {DEAD}
  AND (j.dedupe_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM jobq_job AS a WHERE a.dedupe_key = j.dedupe_key AND a.{_ACTIVE}))
RETURNING j.id
"""

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
"""

# counts_queue: COUNTS for one queue. PENDING and DEAD are index-only ranges of their indexes (queue
# leads them); RUNNING filters the lease index's rows (as many as jobs run); DONE filters the DONE part
# of jobq_job_finished on its included queue column, index-only.
COUNTS_QUEUE = f"""
SELECT {PENDING}, count(*) FROM jobq_job WHERE status = {PENDING} AND queue = %(queue)s
UNION ALL SELECT {RUNNING}, count(*) FROM jobq_job WHERE status = {RUNNING} AND queue = %(queue)s
UNION ALL SELECT {DONE}, count(*) FROM jobq_job WHERE status = {DONE} AND queue = %(queue)s
UNION ALL SELECT {DEAD}, count(*) FROM jobq_job WHERE status = {DEAD} AND queue = %(queue)s
"""

# prune: delete up to %(batch)s finished jobs of one terminal status older than the retention.
# The status guard repeats DONE/DEAD so that no parameter can ever make it delete an active job.
# The batch is picked (and locked, skipping rows a concurrent prune holds) from jobq_job_finished
# (finished_at, status), where the old rows are one range whose status is checked in the index without
# visiting the table (oldest first: the order keeps every plan, generic ones too, on that index), and
# the DELETE finds them by primary key (id = ANY(ARRAY(...)), an init plan): "id IN (subquery)" would
# let the planner hash-join the batch against a scan of the whole table.
PRUNE = f"""
DELETE FROM jobq_job
WHERE id = ANY(ARRAY(
    SELECT id FROM jobq_job
    WHERE status = %(status)s AND status IN ({DONE}, {DEAD})
      AND finished_at < {NOW} - make_interval(secs => %(age)s)
    ORDER BY finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)) AND status IN ({DONE}, {DEAD})
"""

# set_progress: record {"done", "total"} on an owned RUNNING job.
SET_PROGRESS = f"""
UPDATE jobq_job SET progress = %(progress)s::jsonb
WHERE id = %(id)s AND {_OWNED} AND attempts = %(attempt)s
RETURNING id
"""

# worker_beat: upsert the worker's row (who is alive, what it runs). One row per worker process;
# only that process writes it, so there is no contention.
WORKER_BEAT = f"""
INSERT INTO jobq_worker (worker_id, hostname, pid, lanes, running, started_at, last_seen_at, stopped_at)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(lanes)s::jsonb, %(running)s, {NOW}, {NOW},
        CASE WHEN %(stopped)s THEN {NOW} END)
ON CONFLICT (worker_id) DO UPDATE
SET running = EXCLUDED.running, last_seen_at = EXCLUDED.last_seen_at, stopped_at = EXCLUDED.stopped_at
"""

# prune_workers: forget workers not seen for a long time.
PRUNE_WORKERS = f"""
DELETE FROM jobq_worker WHERE last_seen_at < {NOW} - make_interval(secs => %(age)s)
"""

# retry_in_slot: record a failed attempt and start the next one in the same worker slot, keeping the
# job RUNNING and owned: attempts += 1 (a new fencing token), the lease renewed, the error appended.
# Only while attempts remain; otherwise the caller fails the job as usual.
RETRY_IN_SLOT = f"""
UPDATE jobq_job
SET attempts = attempts + 1, started_at = {NOW}, lease_until = {NOW} + make_interval(secs => %(lease)s),
    last_error = %(error)s,
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempts, 'at', {NOW}, 'worker', worker_id, 'error', %(error)s::text))
WHERE id = %(id)s AND {_OWNED} AND attempts = %(attempt)s AND attempts < max_attempts
RETURNING attempts
"""

# release_orphans: after a claim whose reply was lost (connection dropped after commit), give back
# every job of this queue that this worker holds but does not know it runs. Only this worker's
# dispatcher for the queue writes rows with this worker_id and queue, so nothing races it.
RELEASE_ORPHANS = f"""
UPDATE jobq_job
SET status = {PENDING}, worker_id = NULL, lease_until = NULL, run_at = {NOW},
    max_attempts = max_attempts + 1
WHERE status = {RUNNING} AND worker_id = %(worker_id)s AND queue = %(queue)s
  AND id <> ALL(%(known)s::bigint[])
RETURNING id
"""

# job_state: re-read a job to resolve a write whose outcome is unknown (connection lost mid-commit).
JOB_STATE = """
SELECT status, worker_id, attempts FROM jobq_job WHERE id = %(id)s
"""

# complete_and_claim: the worker's cycle in one statement and one commit: mark the finished jobs of
# one queue DONE (COMPLETE_MANY's guard) and claim up to %(limit)s more from it (CLAIM's fenced
# selection). The two UPDATEs touch disjoint rows (RUNNING vs PENDING). One row always comes back
# (the LEFT JOIN): the ids completed, then the claimed job's columns, NULL when nothing was claimed.
COMPLETE_AND_CLAIM = f"""
WITH done AS ({COMPLETE_MANY}),
{_PICK_ONE},
claimed AS ({_TAKE})
SELECT (SELECT coalesce(array_agg(id), '{{}}') FROM done) AS completed, claimed.*
FROM (SELECT 1) AS one LEFT JOIN claimed ON true
"""
