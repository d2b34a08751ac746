"""PostgreSQL: job control asked by an operator or the application: cancelling and rescheduling jobs."""

from .jobs import _wake_waiters
from .terms import CANCELLED, NOW, PENDING, RUNNING, WAITING, wake

# cancel: for each job of %(ids)s (of queue %(queue)s, task %(task)s, carrying every tag of the JSON
# array %(tags)s, where not NULL), a PENDING
# one ends CANCELLED at once (never claimed: a claim takes PENDING rows only, and this UPDATE and a
# claim lock the same row, so exactly one of them wins), its dedupe key given up; a RUNNING one is
# asked to stop: cancel_requested_at is set, and the outcome its run writes next (done, failed,
# snoozed, released, reaped) ends it CANCELLED (jobs.py, _ASKED); the worker learns of it from its
# next heartbeat. Finished jobs are left as they are. The rows are locked in id order, waiting for a
# row another transaction holds (a claim's or an outcome's lock is brief); the caller retries a
# deadlock with a worker's batch of outcomes. RETURNING the new status tells which jobs ended
# (CANCELLED) and which were asked (RUNNING).
CANCEL = f"""
WITH chosen AS MATERIALIZED (
    SELECT id FROM jobq_job
    WHERE id = ANY(%(ids)s::bigint[]) AND status IN ({PENDING}, {RUNNING}, {WAITING})
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text) AND (%(task)s::text IS NULL OR task = %(task)s::text)
      AND (%(tags)s::jsonb IS NULL OR tags @> %(tags)s::jsonb)
    ORDER BY id
    FOR UPDATE
)
UPDATE jobq_job AS j
SET status = CASE WHEN j.status IN ({PENDING}, {WAITING}) THEN {CANCELLED} ELSE j.status END,
    finished_at = CASE WHEN j.status IN ({PENDING}, {WAITING}) THEN {NOW} ELSE j.finished_at END,
    key_released = j.key_released OR j.status IN ({PENDING}, {WAITING}),
    last_error = CASE WHEN j.status IN ({PENDING}, {WAITING}) THEN 'cancelled by ' || %(by)s::text ELSE j.last_error END,
    cancel_requested_at = COALESCE(j.cancel_requested_at, {NOW}),
    cancelled_by = COALESCE(j.cancelled_by, %(by)s::text)
WHERE j.id = ANY(ARRAY(SELECT id FROM chosen)) AND j.status IN ({PENDING}, {RUNNING}, {WAITING})
RETURNING j.id, j.status, {_wake_waiters("j", f"j.status = {CANCELLED}")}
"""

# cancel_select: up to %(limit)s ids of the PENDING or RUNNING jobs a cancel_many() filter names (a
# queue, a task; NULL: any), above %(after)s and at most %(until)s (the newest id when the call began,
# so jobs enqueued meanwhile are not taken), in id order. PENDING jobs are found on jobq_job_claim,
# RUNNING ones on jobq_job_lease. Read-only; CANCEL then locks and re-checks each row.
CANCEL_SELECT = f"""
SELECT id FROM jobq_job
WHERE status IN ({PENDING}, {RUNNING}, {WAITING}) AND id > %(after)s AND id <= %(until)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id
LIMIT %(limit)s
"""

# cancel_select_tagged: as CANCEL_SELECT, of the jobs carrying every tag of %(tags)s, read on
# jobq_job_tags (@> is strict: it implies the index's tags IS NOT NULL) in no particular order: an
# ORDER BY id would let a generic plan walk the primary key through the backlog instead. Progress
# without a cursor: a job CANCEL took is CANCELLED, or RUNNING with cancel_requested_at set, or
# finished, and is not selected again (a RUNNING job asked before the call is not counted again).
# "id + 0" keeps the bound on the newest id a filter: as an index condition it would let a generic
# plan (a guessed limit, a third of the table under the bound) walk the primary key instead.
CANCEL_SELECT_TAGGED = f"""
SELECT id FROM jobq_job
WHERE tags @> %(tags)s::jsonb AND status IN ({PENDING}, {RUNNING}, {WAITING}) AND cancel_requested_at IS NULL
  AND id + 0 <= %(until)s
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
LIMIT %(limit)s
"""

# newest_id: the highest job id so far (0 for an empty table). Read-only.
NEWEST_ID = "SELECT COALESCE(max(id), 0) FROM jobq_job"

# reschedule: a PENDING job's run_at and/or priority (NULL: kept), in one guarded statement: a job a
# claim took first is RUNNING and left alone (the claim and this UPDATE lock the same row). A job due
# now notifies its queue as an enqueue does (wake), so an idle worker takes it at once.
RESCHEDULE = f"""
UPDATE jobq_job
SET run_at = COALESCE(%(run_at)s::timestamptz, run_at), priority = COALESCE(%(priority)s, priority)
WHERE id = %(id)s AND status = {PENDING}
RETURNING id, queue, run_at <= {NOW} AS due, CASE WHEN run_at <= {NOW} THEN {wake("queue")} END
"""
