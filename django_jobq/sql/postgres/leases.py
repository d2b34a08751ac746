"""PostgreSQL: a run's lease, kept and recovered. A worker renews the leases of the runs it holds
(RENEW_LEASE, HEARTBEAT), gives them back when it stops (RELEASE), and the reaper returns the runs
whose lease expired (REAP). Each is guarded as the transitions of jobs.py are (status, owner, fence).

Maintenance statements that touch many rows (HEARTBEAT, REAP) lock them with FOR UPDATE SKIP LOCKED
first and update only what they locked: they never wait for a row another transaction holds, so they
cannot deadlock with each other or be stalled by a slow transaction; a skipped row is simply handled
by the next pass."""

from .jobs import _ASKED, _J_ASKED, _J_OWNED, _J_OWNED_IDS, _OWNED, _append_error, _wake_waiters
from .terms import CANCELLED, DEAD, NOW, PENDING, RUNNING, wake

# renew_lease: set one owned job's lease to now + lease (an explicit renewal may also shorten it).
RENEW_LEASE = f"""
UPDATE jobq_job SET lease_until = {NOW} + make_interval(secs => %(lease)s)
WHERE id = %(id)s AND {_OWNED} AND fence = COALESCE(%(fence)s, fence)
RETURNING id
"""

# heartbeat: renew every lease the worker holds, in one statement, and report, per held run, what it
# could not renew: 'lost' (no longer this run's), 'busy' (still its own, but another transaction holds
# the row: skipped, not waited for, so one held row never delays the other renewals; the worker renews
# it on a connection that waits for the lock, worker/lock_waits.py, and never counts it renewed
# meanwhile), and 'asked' (its own, a cancel was asked of it). Only the ids the worker is running are
# named, so a job it lost track of (e.g. a claim whose reply was lost) is left to expire. A lease is
# never shortened (GREATEST), so a task's longer renew_lease() survives the heartbeat. 'lost' and
# 'busy' are read from the statement's snapshot: a row skipped that is still ours is busy, not lost.
HEARTBEAT = f"""
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(fences)s::bigint[]) AS h(id, fence)
), mine AS MATERIALIZED (
    SELECT j.id FROM jobq_job AS j
    WHERE j.id = ANY(%(ids)s::bigint[]) AND {_J_OWNED_IDS}
    FOR UPDATE SKIP LOCKED
), renewed AS (
    UPDATE jobq_job AS j
    SET lease_until = GREATEST(j.lease_until, {NOW} + make_interval(secs => %(lease)s))
    FROM held AS h
    WHERE j.id = ANY(ARRAY(SELECT id FROM mine)) AND j.id = h.id AND j.fence = h.fence
    RETURNING j.id
)
SELECT h.id, h.fence, CASE WHEN j.id IS NULL THEN 'lost' ELSE 'busy' END AS kind FROM held AS h
LEFT JOIN jobq_job AS j ON j.id = h.id AND {_J_OWNED_IDS} AND j.fence = h.fence
WHERE j.id IS NULL OR h.id <> ALL(ARRAY(SELECT id FROM mine))
UNION ALL
SELECT j.id, j.fence, 'asked' FROM jobq_job AS j JOIN held AS h ON j.id = h.id AND j.fence = h.fence
WHERE j.id = ANY(%(ids)s::bigint[]) AND {_J_OWNED_IDS} AND {_J_ASKED}
"""

# release: a stopping worker gives back every job it still holds (RUNNING under its worker_id, which
# is unique per process), at once, including any it lost track of. A release does not use up an
# attempt (attempts - 1: the claim had counted it) for the first %(free)s releases of a job; after
# that each release counts, and a job out of attempts goes DEAD, so a job that outlives every deploy
# cannot circulate forever. The fence stays: the next claim raises it.
_RELEASE_DEAD = "(j.releases >= %(free)s AND j.attempts >= j.max_attempts)"
_RELEASE_ENDS = f"({_RELEASE_DEAD} OR {_J_ASKED})"
RELEASE = f"""
UPDATE jobq_job AS j
SET status = CASE WHEN {_J_ASKED} THEN {CANCELLED} WHEN {_RELEASE_DEAD} THEN {DEAD} ELSE {PENDING} END,
    attempts = CASE WHEN j.releases < %(free)s THEN j.attempts - 1 ELSE j.attempts END,
    releases = j.releases + 1,
    worker_id = CASE WHEN {_RELEASE_ENDS} THEN j.worker_id END,
    finished_at = CASE WHEN {_RELEASE_ENDS} THEN {NOW} END,
    key_released = j.key_released OR {_J_ASKED},
    last_error = CASE WHEN {_J_ASKED} THEN 'cancelled by ' || coalesce(j.cancelled_by, '?')
        WHEN {_RELEASE_DEAD} THEN 'released by a stopping worker with no attempts left' ELSE j.last_error END,
    exception = CASE WHEN {_J_ASKED} THEN NULL
        WHEN {_RELEASE_DEAD} THEN 'released by a stopping worker with no attempts left' END,
    lease_until = NULL, run_at = {NOW},
    errors = {_append_error("j", f"jsonb_build_object('attempt', j.attempts, 'at', {NOW}, 'worker', j.worker_id, 'error', 'released: worker shut down')")}
WHERE {_J_OWNED}
RETURNING j.id, {_wake_waiters("j", f"j.status IN ({DEAD}, {CANCELLED})")}
"""

# reap: every RUNNING job whose lease expired goes back to PENDING, or to DEAD when it has used all
# its attempts, in one statement (the whole backlog at once). The rows are locked SKIP LOCKED first:
# a row a worker is writing (its outcome, a heartbeat) is left for the next pass instead of being
# waited for, and the UPDATE re-checks the expiry on the locked, current row version, so a live job
# whose heartbeat committed first is never taken. A job back to PENDING is due at once: its queue is
# notified as by an enqueue (wake: only while a worker may be waiting), so an idle worker takes it now
# rather than at its next poll; one gone DEAD wakes only its wait_for() callers.
REAP = f"""
WITH expired AS MATERIALIZED (
    SELECT id FROM jobq_job WHERE status = {RUNNING} AND lease_until < {NOW}
    FOR UPDATE SKIP LOCKED
)
UPDATE jobq_job AS j
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} WHEN attempts >= max_attempts THEN {DEAD} ELSE {PENDING} END,
    finished_at = CASE WHEN attempts >= max_attempts OR {_ASKED} THEN {NOW} END,
    worker_id = CASE WHEN attempts >= max_attempts OR {_ASKED} THEN worker_id END,
    key_released = key_released OR {_ASKED},
    run_at = {NOW}, lease_until = NULL, error_count = error_count + 1,
    last_error = 'lease expired: worker ' || coalesce(worker_id, '?') || ' stopped renewing it',
    exception = CASE WHEN {_ASKED} THEN NULL WHEN attempts >= max_attempts THEN 'lease expired' END,
    errors = {_append_error("j", f"jsonb_build_object('attempt', attempts, 'at', {NOW}, 'worker', worker_id, 'error', 'lease expired: worker stopped renewing it')")}
WHERE j.id = ANY(ARRAY(SELECT id FROM expired)) AND status = {RUNNING} AND lease_until < {NOW}
RETURNING id, {_wake_waiters("j", f"j.status IN ({DEAD}, {CANCELLED})")}, j.queue, j.status,
          CASE WHEN j.status = {PENDING} THEN {wake("j.queue")} END
"""
