"""PostgreSQL: per-queue state (jobq_queue), pausing and resuming a queue.

Workers never join this table into their claim: each worker reads PAUSED_QUEUES at most once per poll
interval (and when a pause or resume notifies it) and leaves the paused queues out of its claims, so
the claim statement costs the same whether anything is paused or not.
"""

from .terms import NOW

# pause_queue: mark the queue paused, creating its row if it has none. A row comes back only when the
# queue was not paused (the insert, or the DO UPDATE whose WHERE found it running), so of any number of
# concurrent pausers exactly one hears True: a second insert of the same name waits for the first
# one's transaction and then takes the DO UPDATE branch, which locks the newest committed version of
# the row and evaluates its WHERE on it (READ COMMITTED), finding it paused. An already paused queue
# keeps who paused it and when. The NOTIFY (payload %(payload)s, which no queue can be named) is
# delivered when the caller's transaction commits, and only if it commits, so workers re-read the
# paused queues at once, never before the pause is visible to them.
PAUSE_QUEUE = f"""
INSERT INTO jobq_queue AS q (name, paused, changed_at, changed_by)
VALUES (%(name)s, true, {NOW}, %(by)s)
ON CONFLICT (name) DO UPDATE
SET paused = true, changed_at = EXCLUDED.changed_at, changed_by = EXCLUDED.changed_by
WHERE NOT q.paused
RETURNING q.name, CASE WHEN %(notify)s THEN pg_notify(%(channel)s, %(payload)s) END
"""

# resume_queue: mark a paused queue running again. A plain UPDATE guarded by "paused": a queue that has
# no row was never paused, and no row is created for it (a mistyped name leaves nothing behind).
# Concurrent resumers queue on the row lock and re-check the guard on the newest version, so exactly
# one of them hears True; a pause and a resume of one queue are ordered by the same lock. The NOTIFY is
# PAUSE_QUEUE's, delivered on commit.
RESUME_QUEUE = f"""
UPDATE jobq_queue AS q
SET paused = false, changed_at = {NOW}, changed_by = %(by)s
WHERE q.name = %(name)s AND q.paused
RETURNING q.name, CASE WHEN %(notify)s THEN pg_notify(%(channel)s, %(payload)s) END
"""

# paused_queues: the names of the paused queues, sorted. Read-only; the table holds one row per queue
# ever paused (a handful), so this is a scan of a few rows, the one read a worker adds per poll
# interval.
PAUSED_QUEUES = """
SELECT name FROM jobq_queue WHERE paused ORDER BY name
"""
