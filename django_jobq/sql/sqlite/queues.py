"""SQLite: pausing and resuming queues (sql/postgres/queues.py)."""

from .terms import NOW

# pause_queue / resume_queue: a row back only for the caller that changed the state (the manager
# wakes this process's workers on commit).
PAUSE_QUEUE = f"""
INSERT INTO jobq_queue (name, paused, changed_at, changed_by)
VALUES (%(name)s, 1, {NOW}, %(by)s)
ON CONFLICT (name) DO UPDATE
SET paused = 1, changed_at = excluded.changed_at, changed_by = excluded.changed_by
WHERE NOT jobq_queue.paused
RETURNING name, NULL
"""
RESUME_QUEUE = f"""
UPDATE jobq_queue SET paused = 0, changed_at = {NOW}, changed_by = %(by)s
WHERE name = %(name)s AND paused
RETURNING name, NULL
"""
PAUSED_QUEUES = "SELECT name FROM jobq_queue WHERE paused ORDER BY name"
