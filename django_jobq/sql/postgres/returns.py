"""PostgreSQL: the jobs a worker gives back without running them (claimed ahead and never started;
snoozed; orphans of a lost claim reply), and the backlog probe a slot asks before holding a job
through an in-slot retry. Fenced like every transition out of RUNNING (sql/postgres/jobs.py has the
rules)."""

from .jobs import _ASKED, _J_ASKED, _J_OWNED_IDS, _OWNED, _wake_waiters
from .pick import _REST
from .terms import CANCELLED, NOW, PENDING, RUNNING, wake

# release_unstarted: jobs a worker claimed ahead and never started (it is stopping, they wait behind
# long runs, or their lease may have run out) go back to PENDING at once, keeping their run_at (their
# place in the queue). Nothing ran, so the attempt the claim counted is returned and no release is
# counted. Fenced like every transition: only runs this worker still owns. Idle workers are woken as
# by an enqueue (wake), so another worker takes them now rather than at its next poll.
# A job a cancel was asked of meanwhile ends CANCELLED instead, never claimed again.
RELEASE_UNSTARTED = f"""
UPDATE jobq_job AS j
SET status = CASE WHEN {_J_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    worker_id = CASE WHEN {_J_ASKED} THEN j.worker_id END,
    finished_at = CASE WHEN {_J_ASKED} THEN {NOW} END,
    key_released = j.key_released OR {_J_ASKED},
    last_error = CASE WHEN {_J_ASKED} THEN 'cancelled by ' || coalesce(j.cancelled_by, '?') ELSE j.last_error END,
    lease_until = NULL, started_at = NULL, attempts = j.attempts - 1
FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS d(id, fence)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = d.id AND {_J_OWNED_IDS} AND j.fence = d.fence
RETURNING j.id, j.queue, CASE WHEN j.status = {PENDING} THEN {wake("j.queue")} END
"""

# due_exists: is a PENDING job due in one queue (or in every queue but %(exclude)s)? Asked by a slot
# that would hold its job through an in-slot retry while the lane has no free slot. Reads the claim
# index (status PENDING: queue, priority, run_at) and stops at the first row; takes no lock.
DUE_EXISTS = f"""SELECT EXISTS (SELECT 1 FROM jobq_job
    WHERE status = {PENDING} AND queue = %(queue)s AND run_at <= {NOW})"""
DUE_EXISTS_REST = f"""SELECT EXISTS (SELECT 1 FROM jobq_job
    WHERE status = {PENDING} AND {_REST.format(q="queue")} AND run_at <= {NOW})"""

# snooze: give owned runs back to PENDING without using up an attempt (the claim had counted it),
# due again after %(delays)s seconds each: a job over a task's cap, or without a rate-limit permit.
# The fence stays raised (the next claim raises it again), so the run is over for good. A job a cancel
# was asked of ends CANCELLED instead (sql/postgres/jobs.py, _ASKED).
SNOOZE = f"""
UPDATE jobq_job AS j
SET status = CASE WHEN {_J_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    finished_at = CASE WHEN {_J_ASKED} THEN {NOW} END,
    key_released = j.key_released OR {_J_ASKED},
    worker_id = CASE WHEN {_J_ASKED} THEN j.worker_id END,
    lease_until = NULL, started_at = NULL, attempts = j.attempts - 1,
    run_at = {NOW} + make_interval(secs => d.delay)
FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[], %(delays)s::float8[]) AS d(id, fence, delay)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = d.id AND {_J_OWNED_IDS} AND j.fence = d.fence
RETURNING j.id
"""

# release_orphans: after a claim whose reply was lost (connection dropped after commit), give back
# every job of this queue that this worker holds but does not know it runs; they never ran, so the
# attempt the claim counted is returned. Only this worker's dispatcher for the queue claims rows
# with this worker_id and queue (worker ids are unique per live process, and a worker's lanes serve
# disjoint sets of queues), so nothing races it. RELEASE_ORPHANS_REST is the same for the "*" lane.
_RELEASE_ORPHANS = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    worker_id = CASE WHEN {_ASKED} THEN worker_id END, finished_at = CASE WHEN {_ASKED} THEN {NOW} END,
    key_released = key_released OR {_ASKED},
    last_error = CASE WHEN {_ASKED} THEN 'cancelled by ' || coalesce(cancelled_by, '?') ELSE last_error END,
    lease_until = NULL, run_at = {NOW}, attempts = attempts - 1
WHERE status = {RUNNING} AND worker_id = %(worker_id)s AND {{queues}}
  AND id <> ALL(%(known)s::bigint[])
RETURNING id
"""
RELEASE_ORPHANS = _RELEASE_ORPHANS.format(queues="queue = %(queue)s")
RELEASE_ORPHANS_REST = _RELEASE_ORPHANS.format(queues=_REST.format(q="queue"))

# snooze_run: a run that raised Snooze goes back to PENDING, due %(delay)s seconds from now, without
# using up an attempt (the claim had counted it), its snoozes counted; only by the owner of this run.
# A job a cancel was asked of ends CANCELLED instead.
SNOOZE_RUN = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    finished_at = CASE WHEN {_ASKED} THEN {NOW} END,
    worker_id = CASE WHEN {_ASKED} THEN worker_id END,
    key_released = key_released OR {_ASKED},
    attempts = attempts - 1, snoozes = snoozes + 1, lease_until = NULL, started_at = NULL,
    run_at = {NOW} + make_interval(secs => %(delay)s)
WHERE id = %(id)s AND {_OWNED} AND fence = %(fence)s
RETURNING status, {_wake_waiters("jobq_job", f"jobq_job.status = {CANCELLED}")}
"""
