"""PostgreSQL statements of a job's run: the claim, its outcome, and the operator's requeue (the
renewal and recovery of leases are in leases.py). Each runs as one statement (atomic on its own, or
part of the caller's transaction) and every parameter is bound, never formatted in.

Time: every comparison uses NOW, the database clock, unless the caller binds %(now)s (the "python"
clock of JOBQ["CLOCK"], used by tests that move time with time-machine).

Transitions out of RUNNING are compare-and-set: they name the job id, require status RUNNING, the
owner's worker_id and the fence (the fencing token) and report success through RETURNING. The fence
grows by one with every claim and every in-slot retry and nothing ever lowers it (a requeue resets
attempts, never the fence), so no two runs of a job ever hold the same token. Under READ COMMITTED an
UPDATE that finds its row changed by a concurrent commit re-checks its WHERE on the new row version, so
a second writer whose guard no longer holds changes nothing.

The per-job error history keeps only the last %(history)s entries (_append_error); error_count
counts every failed attempt. An entry holds the attempt, when, the worker, the error text and, when an
exception failed the attempt, its class path ('class').
"""

from .enqueue import window_over
from .pick import (
    _HELD_BACK,
    _HELD_BACK_CAPPED,
    _PICK_ANY,
    _PICK_CAPPED,
    _PICK_CAPPED_TASK_CAPS,
    _PICK_ONE,
    _PICK_ONE_TASK_CAPS,
    _PICK_QUEUES,
    _PICK_REST,
    _PICK_REST_TASK_CAPS,
    _WALK,
)
from .stats import EXCEPTION_CLASS as _EXCEPTION_CLASS
from .terms import CANCELLED, DEAD, DONE, NOW, PENDING, RUNNING, WAITING, wake, wake_if_due

__all__ = ["DEAD", "DONE", "NOW", "PENDING", "RUNNING", "_WALK"]  # shared with stats.py and the tests


def _wake_waiters(alias: str, when: str = "true") -> str:
    """A RETURNING term: NOTIFY the completion channel with the job's id when a wait_for() caller
    marked it (``awaited``) and ``when`` holds; delivered when the transaction commits."""
    return f"CASE WHEN {alias}.awaited AND {when} THEN pg_notify(%(done_channel)s, {alias}.id::text) END"


def _append_error(alias: str, entry: str) -> str:
    """``alias``.errors with ``entry`` (a jsonb object expression) appended, cut to the last
    %(history)s entries."""
    return (
        f"jsonb_path_query_array({alias}.errors || jsonb_build_array({entry}), "
        "'$[last - $n + 1 to last]', jsonb_build_object('n', %(history)s::int))"
    )


# claim: the selection (postgres_pick: up to %(limit)s due PENDING jobs, in claim order, locked FOR
# UPDATE SKIP LOCKED behind a MATERIALIZED CTE) and the UPDATE below, in one statement. The UPDATE finds
# the picked rows by primary key (id = ANY(ARRAY(...)), an init plan), never by a join whose plan could
# scan the table.
# fence += 1 gives this run a token no earlier run held; attempts += 1 counts it against max_attempts.
# RETURNING names the columns a worker needs, never the error history or an old result.
CLAIMED_COLUMNS = (
    "id", "task", "queue", "payload", "status", "priority", "run_at", "attempts", "max_attempts",
    "fence", "releases", "snoozes", "worker_id", "lease_until", "dedupe_key", "concurrency_key",
    "created_at", "started_at", "tags", "trace_context",
)  # fmt: skip
_TAKE = f"""UPDATE jobq_job AS j
SET status = {RUNNING}, worker_id = %(worker_id)s, attempts = j.attempts + 1, fence = j.fence + 1,
    started_at = {NOW}, lease_until = {NOW} + make_interval(secs => %(lease)s)
WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING {", ".join("j." + c for c in CLAIMED_COLUMNS)}"""
CLAIM_ANY_QUEUE = f"WITH {_PICK_ANY}\n{_TAKE}"
CLAIM_ONE_QUEUE = f"WITH {_PICK_ONE}\n{_TAKE}"
CLAIM_QUEUES = f"WITH {_PICK_QUEUES}\n{_TAKE}"
CLAIM_REST = f"WITH {_PICK_REST}\n{_TAKE}"

# Owned by the caller: RUNNING under its worker_id (the fence is checked by each statement; a NULL
# fence, the manager's unfenced form for manual use, accepts any run of this owner).
_OWNED = f"status = {RUNNING} AND worker_id = %(worker_id)s"
_J_OWNED = f"j.status = {RUNNING} AND j.worker_id = %(worker_id)s"
# The same guard for a statement that names its jobs by id (j.id = ANY(...)). "status + 0" is the same
# test, written so that the planner cannot answer it from the lease index (partial: status RUNNING):
# a generic plan estimates few RUNNING rows and would scan that whole index, which, between two
# vacuums, keeps an entry for every job that has run (a bitmap scan never marks dead entries), so the
# statement's cost would grow with the jobs run since the last vacuum. By primary key it reads its rows.
_J_OWNED_IDS = f"j.status + 0 = {RUNNING} AND j.worker_id = %(worker_id)s"

# A cancel asked of a RUNNING job (CANCEL) ends whatever outcome its run writes afterwards as
# CANCELLED: a result is discarded, a failure never retried. The outcome's UPDATE and the cancel's lock
# the same row, so exactly one order holds: a cancel that committed first turns the outcome into
# CANCELLED, a cancel that comes after finds the job finished and changes nothing.
_ASKED = "cancel_requested_at IS NOT NULL"
_J_ASKED = "j.cancel_requested_at IS NOT NULL"

# complete: RUNNING -> DONE (CANCELLED if a cancel was asked), only by the owner of this very run; the
# status written (an atomic task rolls its work back when its run ends CANCELLED).
COMPLETE = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {DONE} END,
    result = CASE WHEN {_ASKED} THEN NULL ELSE %(result)s::jsonb END,
    key_released = key_released OR {_ASKED}, finished_at = {NOW}, lease_until = NULL
WHERE id = %(id)s AND {_OWNED} AND fence = COALESCE(%(fence)s, fence)
RETURNING status, {_wake_waiters("jobq_job")}
"""

# complete_many: COMPLETE for a batch of (id, fence, result) in one statement, in three CTEs that
# COMPLETE_AND_CLAIM shares. done_mine locks the owned rows SKIP LOCKED: a row another transaction
# holds (an application's transaction that locked the job's row and stays open) is never waited for,
# so a lane's cycle never stalls behind it. done writes them, returning each id with the status it
# wrote (DONE, or CANCELLED when a cancel was asked: the worker reports that, not a success).
# done_busy names the runs skipped that the statement's snapshot shows still owned: the worker writes
# them again on a connection that waits for the lock (worker/lock_waits.py). A row whose guard fails
# is in neither (no longer this run's). (id = ANY(ids) and _J_OWNED_IDS keep every plan, generic ones
# too, on the primary key; the same holds for HEARTBEAT, RELEASE_UNSTARTED and SNOOZE.)
# %(ids)s may be empty (a claim with nothing to write): _ANY_DONE, a one-time filter, then skips
# each part before it reads a row, which a generic plan made while the table was small could do
# by scanning the table.
_ANY_DONE = "cardinality(%(ids)s::bigint[]) > 0"
_DONE = f"""done_mine AS MATERIALIZED (
    SELECT j.id FROM jobq_job AS j
    WHERE {_ANY_DONE} AND j.id = ANY(%(ids)s::bigint[]) AND {_J_OWNED_IDS}
    FOR NO KEY UPDATE SKIP LOCKED
), done AS (
    UPDATE jobq_job AS j
    SET status = CASE WHEN {_J_ASKED} THEN {CANCELLED} ELSE {DONE} END,
        result = CASE WHEN {_J_ASKED} THEN NULL ELSE d.result::jsonb END,
        key_released = j.key_released OR {_J_ASKED}, finished_at = {NOW}, lease_until = NULL
    FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(results)s::text[]) AS d(id, fence, result)
    WHERE {_ANY_DONE} AND j.id = ANY(ARRAY(SELECT id FROM done_mine)) AND j.id = d.id AND {_J_OWNED_IDS}
      AND j.fence = d.fence
    RETURNING j.id, j.status, j.has_dependents, {_wake_waiters("j")}
), done_busy AS (
    SELECT h.id FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS h(id, fence)
    WHERE {_ANY_DONE} AND h.id <> ALL(ARRAY(SELECT id FROM done_mine)) AND EXISTS (
        SELECT 1 FROM jobq_job AS j WHERE j.id = h.id AND {_J_OWNED_IDS} AND j.fence = h.fence)
)"""
# One row per run: its id, the status written (NULL for a busy one) and whether it had dependents
# (the trigger settled them in this statement).
COMPLETE_MANY = f"""WITH {_DONE}
SELECT id, status, has_dependents FROM done UNION ALL SELECT id, NULL, NULL FROM done_busy"""

_ENDS_CANCELLED = f"(%(discard)s OR {_ASKED})"
_GIVE_UP = f"(%(permanent)s OR attempts >= max_attempts OR {_ENDS_CANCELLED})"
# What killed a job that goes DEAD (the column exception, the dead letters' groups): its exception's
# class path without "builtins." (as a traceback names it), else the class its error text names; at
# most 200 characters, as it is a key of the index jobq_job_dead.
_DIED_OF = (
    "COALESCE(left(regexp_replace(%(error_class)s::text, '^builtins[.]', ''), 200), "
    + _EXCEPTION_CLASS.replace("%(expressions)s", "%(error)s::text")
    + ")"
)

# fail: RUNNING -> PENDING (retry at now + backoff), DEAD (permanent, or attempts exhausted) or
# CANCELLED (a Discard, %(discard)s, or a cancel asked), only by the owner of this run. Without an
# explicit backoff the delay is full jitter below the ceiling of django_jobq.backoff.compute_backoff:
# random() * least(cap, base * 2^(attempts-1)). The error is kept in last_error and appended to the
# (bounded) history. A CANCELLED job gives its dedupe key up.
FAIL = f"""
UPDATE jobq_job AS j
SET status = CASE WHEN {_ENDS_CANCELLED} THEN {CANCELLED} WHEN {_GIVE_UP} THEN {DEAD} ELSE {PENDING} END,
    run_at = CASE WHEN {_GIVE_UP} THEN run_at ELSE {NOW} + make_interval(secs => COALESCE(
        %(backoff)s, random() * LEAST(%(cap)s, %(base)s * power(2, LEAST(attempts - 1, 64))))) END,
    finished_at = CASE WHEN {_GIVE_UP} THEN {NOW} END,
    worker_id = CASE WHEN {_GIVE_UP} THEN worker_id END,
    key_released = key_released OR {_ENDS_CANCELLED},
    lease_until = NULL,
    last_error = %(error)s, error_count = error_count + 1,
    exception = CASE WHEN {_ENDS_CANCELLED} THEN NULL WHEN {_GIVE_UP} THEN {_DIED_OF} END,
    errors = {_append_error("j", f"jsonb_build_object('attempt', attempts, 'at', {NOW}, 'worker', worker_id, 'error', %(error)s::text, 'class', %(error_class)s::text)")}
WHERE id = %(id)s AND {_OWNED} AND fence = COALESCE(%(fence)s, fence)
RETURNING status, {_wake_waiters("j", f"j.status IN ({DEAD}, {CANCELLED})")}
"""

# requeue_free_keys: before a requeue, release the keys of the chosen DEAD jobs whose holder (another
# job) has finished and is past its window, as an enqueue would (postgres_enqueue); run in the same
# transaction as REQUEUE, so that REQUEUE's snapshot sees them released.
REQUEUE_FREE_KEYS = f"""
UPDATE jobq_job AS h SET key_released = true
WHERE h.dedupe_key = ANY(ARRAY(
        SELECT dedupe_key FROM jobq_job
        WHERE id = ANY(%(ids)s::bigint[]) AND status IN ({DEAD}, {CANCELLED}) AND dedupe_key IS NOT NULL
          AND key_released))
  AND NOT h.key_released AND {window_over("h")}
"""

# requeue: DEAD or CANCELLED -> PENDING with a fresh attempt budget (attempts and releases reset; the fence and the
# error history are kept). A job with a dedupe key takes its key back: a job whose key another job
# holds (active, or finished inside its window) is skipped, and of several selected jobs sharing a
# key only one is requeued (the holder, else the newest), so the unique index never refuses the
# statement as a whole; it still guards the race with a concurrent enqueue (the caller retries job by
# job then). A job requeued to run now notifies its queue as an enqueue does (wake), so an idle worker
# takes it at once; one requeued to a later run_at wakes nobody. %(spread)s (seconds, 0: none) adds to
# each job's run_at its own random share of that interval, so a bulk requeue's jobs are not all due at once.
REQUEUE = f"""
WITH chosen AS MATERIALIZED (
    SELECT DISTINCT ON (j.dedupe_key, CASE WHEN j.dedupe_key IS NULL THEN j.id END) j.id
    FROM jobq_job AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.status IN ({DEAD}, {CANCELLED})
      AND (j.dedupe_key IS NULL OR NOT j.key_released OR NOT EXISTS (
            SELECT 1 FROM jobq_job AS a WHERE a.dedupe_key = j.dedupe_key AND NOT a.key_released))
    ORDER BY j.dedupe_key, CASE WHEN j.dedupe_key IS NULL THEN j.id END, j.key_released, j.id DESC
)
UPDATE jobq_job AS j
SET status = {PENDING}, attempts = 0, releases = 0,
    run_at = COALESCE(%(run_at)s::timestamptz, {NOW}) + make_interval(secs => %(spread)s::float8 * random()),
    priority = COALESCE(%(priority)s, j.priority), worker_id = NULL, lease_until = NULL,
    started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, key_released = false,
    cancel_requested_at = NULL, cancelled_by = NULL
WHERE j.id = ANY(ARRAY(SELECT id FROM chosen)) AND j.status IN ({DEAD}, {CANCELLED})
RETURNING j.id, j.queue, j.run_at <= {NOW} AS due, CASE WHEN j.run_at <= {NOW} THEN {wake("j.queue")} END
"""

# set_progress: record {"done", "total"} on an owned RUNNING job.
SET_PROGRESS = f"""
UPDATE jobq_job SET progress = %(progress)s::jsonb
WHERE id = %(id)s AND {_OWNED} AND fence = %(fence)s
RETURNING id
"""

# retry_in_slot: record a failed attempt and start the next one in the same worker slot, keeping the
# job RUNNING and owned: attempts += 1, fence += 1 (a new token), the lease renewed, the error
# appended. Only while attempts remain and no cancel was asked; otherwise the caller fails the job as
# usual (FAIL: DEAD, or CANCELLED when a cancel was asked: a cancelled job's failure is never retried).
RETRY_IN_SLOT = f"""
UPDATE jobq_job AS j
SET attempts = attempts + 1, fence = fence + 1, started_at = {NOW},
    lease_until = {NOW} + make_interval(secs => %(lease)s),
    last_error = %(error)s, error_count = error_count + 1,
    errors = {_append_error("j", f"jsonb_build_object('attempt', attempts, 'at', {NOW}, 'worker', worker_id, 'error', %(error)s::text, 'class', %(error_class)s::text)")}
WHERE id = %(id)s AND {_OWNED} AND fence = %(fence)s AND attempts < max_attempts AND NOT {_ASKED}
RETURNING attempts, fence
"""

# lock_job: take a job's row lock, waiting for whoever holds it (no SKIP LOCKED), until the transaction
# ends. For a worker's write that met the row held by another transaction (worker/lock_waits.py): it
# queues for the row, so the reaper (SKIP LOCKED) cannot take the job before it, and the write that
# follows in the same transaction runs on a clock read after the wait (statement_timestamp()).
LOCK_JOB = """
SELECT id FROM jobq_job WHERE id = %(id)s FOR NO KEY UPDATE
"""

# job_state: re-read a job to resolve a write whose outcome is unknown (connection lost mid-commit).
JOB_STATE = """
SELECT status, worker_id, fence FROM jobq_job WHERE id = %(id)s
"""

# complete_and_claim: the worker's cycle in one statement and one commit: write the finished jobs of
# one queue (COMPLETE_MANY's CTEs) and claim up to %(limit)s more from it (CLAIM's fenced selection).
# The two UPDATEs touch disjoint rows (RUNNING vs PENDING). One row always comes back (the LEFT
# JOIN): the ids ended DONE, those ended CANCELLED, the busy ones, whether an ended job had dependents
# (released or cancelled by the trigger after this claim's snapshot: a burst worker claims again), then
# the claimed job's columns, NULL when nothing was claimed. COMPLETE_AND_CLAIM_REST is the same for the "*" lane: it claims
# from every queue but %(exclude)s.
_COMPLETE_AND_CLAIM = f"""
WITH {_DONE},
{{pick}},
claimed AS ({_TAKE})
SELECT (SELECT coalesce(array_agg(id) FILTER (WHERE status = {DONE}), '{{{{}}}}') FROM done) AS completed,
       (SELECT coalesce(array_agg(id) FILTER (WHERE status <> {DONE}), '{{{{}}}}') FROM done) AS cancelled,
       (SELECT coalesce(array_agg(id), '{{{{}}}}') FROM done_busy) AS busy,
       (SELECT coalesce(bool_or(has_dependents), false) FROM done) AS settled, {{held}}claimed.*
FROM (SELECT 1) AS one LEFT JOIN claimed ON true
"""
COMPLETE_AND_CLAIM = _COMPLETE_AND_CLAIM.format(pick=_PICK_ONE, held="")
COMPLETE_AND_CLAIM_REST = _COMPLETE_AND_CLAIM.format(pick=_PICK_REST, held="")
# complete_and_claim_capped: COMPLETE_AND_CLAIM for a queue with MAX_RUNNING, run after CAP_LOCK in
# the same transaction (postgres_pick's _PICK_CAPPED).
COMPLETE_AND_CLAIM_CAPPED = _COMPLETE_AND_CLAIM.format(pick=_PICK_CAPPED, held="")
# complete_and_claim_task_caps (and _rest_, _capped_): the three above for a worker that knows capped
# tasks, or holds rate-limit permits of a task: the pick never takes a job of a task or key at its cap,
# nor more jobs of a rate-limited task than its permits (postgres_pick's _within_caps). The
# second column, held_back, counts the due jobs the pick locked and cut for the caps when its walk
# stopped at the limit: claiming again in the same transaction may find more behind them. Run in a
# transaction that ends under the claimed tasks' CAP_LOCKs (managers/capping.py).
COMPLETE_AND_CLAIM_TASK_CAPS = _COMPLETE_AND_CLAIM.format(
    pick=_PICK_ONE_TASK_CAPS, held=f"{_HELD_BACK} AS held_back, "
)
COMPLETE_AND_CLAIM_REST_TASK_CAPS = _COMPLETE_AND_CLAIM.format(
    pick=_PICK_REST_TASK_CAPS, held=f"{_HELD_BACK} AS held_back, "
)
COMPLETE_AND_CLAIM_CAPPED_TASK_CAPS = _COMPLETE_AND_CLAIM.format(
    pick=_PICK_CAPPED_TASK_CAPS, held=f"{_HELD_BACK_CAPPED} AS held_back, "
)

# cap_lock: serialise the claims of one capped queue ("queue:NAME") or task ("task:NAME") across
# every worker, until this transaction ends (a transaction-level advisory lock: released at commit or
# rollback, so it holds behind any pooler, and no session can keep it by accident). The statement
# that follows counts RUNNING jobs with a snapshot taken after the lock was granted, so two claimers
# never both see a free slot. Every claimer takes its queue's lock before any task's, and task locks
# in name order, so no two claimers ever wait for each other in a cycle.
CAP_LOCK = """
SELECT pg_advisory_xact_lock(hashtextextended('jobq.cap:' || %(name)s, 0))
"""

# wait_mark: a wait_for() caller asks for a completion NOTIFY from this job's finishing statement. The
# mark takes the row lock: a finishing statement that runs after it sees awaited (READ COMMITTED
# re-reads the row it waited for) and notifies; one that committed first leaves the job finished,
# which the caller's next read sees. No row back when the job is finished or already marked.
# A claim meanwhile skips the locked row, so a mark on a due PENDING job wakes workers (wake_if_due).
WAIT_MARK = f"""
UPDATE jobq_job SET awaited = true WHERE id = %(id)s AND status IN ({PENDING}, {RUNNING}, {WAITING}) AND NOT awaited
RETURNING id, {wake_if_due("jobq_job")}
"""

# job_row: a job's every column, or no row. Read-only.
JOB_ROW = """
SELECT * FROM jobq_job WHERE id = %(id)s
"""

# job_task: a job's task, or no row (a job's task never changes: any version of the row answers).
# Read-only.
JOB_TASK = """
SELECT task FROM jobq_job WHERE id = %(id)s
"""

# running_by_task: RUNNING jobs per (task, concurrency_key) of the given tasks, the caller's own
# uncommitted claims included (run after the tasks' CAP_LOCKs, so the snapshot also holds every claim
# the previous lock holders committed). RUNNING jobs are few (at most the slots of every worker), and
# the lease index holds exactly them. Read-only.
RUNNING_BY_TASK = f"""
SELECT task, concurrency_key, count(*) FROM jobq_job
WHERE status = {RUNNING} AND task = ANY(%(tasks)s::text[])
GROUP BY task, concurrency_key
"""
