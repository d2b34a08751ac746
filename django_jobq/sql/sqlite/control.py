"""SQLite: job control, under the names of sql/postgres/control.py. One writer at a time: the
CANCEL statement sees no concurrent write, so its guards hold without row locks."""

from .terms import CANCELLED, NOW, PENDING, RUNNING, WAITING, each

# The job carries every tag of the JSON array %(tags)s (NULL: any job): none of them is missing.
_TAGGED = """(%(tags)s IS NULL OR NOT EXISTS (
    SELECT value FROM json_each(%(tags)s) EXCEPT SELECT value FROM json_each(jobq_job.tags)))"""

CANCEL = f"""
UPDATE jobq_job
SET status = CASE WHEN status IN ({PENDING}, {WAITING}) THEN {CANCELLED} ELSE status END,
    finished_at = CASE WHEN status IN ({PENDING}, {WAITING}) THEN {NOW} ELSE finished_at END,
    key_released = key_released OR status IN ({PENDING}, {WAITING}),
    last_error = CASE WHEN status IN ({PENDING}, {WAITING}) THEN 'cancelled by ' || %(by)s ELSE last_error END,
    cancel_requested_at = COALESCE(cancel_requested_at, {NOW}),
    cancelled_by = COALESCE(cancelled_by, %(by)s)
WHERE id IN {each("ids")} AND status IN ({PENDING}, {RUNNING}, {WAITING})
  AND (%(queue)s IS NULL OR queue = %(queue)s) AND (%(task)s IS NULL OR task = %(task)s) AND {_TAGGED}
RETURNING id, status, NULL
"""

CANCEL_SELECT = f"""
SELECT id FROM jobq_job
WHERE status IN ({PENDING}, {RUNNING}, {WAITING}) AND id > %(after)s AND id <= %(until)s
  AND (%(queue)s IS NULL OR queue = %(queue)s) AND (%(task)s IS NULL OR task = %(task)s) AND {_TAGGED}
ORDER BY id
LIMIT %(limit)s
"""

CANCEL_SELECT_TAGGED = f"""
SELECT id FROM jobq_job
WHERE status IN ({PENDING}, {RUNNING}, {WAITING}) AND cancel_requested_at IS NULL AND id <= %(until)s
  AND (%(queue)s IS NULL OR queue = %(queue)s) AND (%(task)s IS NULL OR task = %(task)s) AND {_TAGGED}
LIMIT %(limit)s
"""

NEWEST_ID = "SELECT COALESCE(max(id), 0) FROM jobq_job"

RESCHEDULE = f"""
UPDATE jobq_job SET run_at = COALESCE(%(run_at)s, run_at), priority = COALESCE(%(priority)s, priority)
WHERE id = %(id)s AND status = {PENDING}
RETURNING id, queue, run_at <= {NOW} AS due
"""
