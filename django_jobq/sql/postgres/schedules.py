"""PostgreSQL: schedules (jobq_schedule) and the ticks they published (jobq_schedule_tick).

A scheduler pass runs in one transaction: DUE_SCHEDULES locks the due rows, then per schedule
RECORD_TICKS claims its ticks, the jobs are enqueued through the manager's usual statements and
SET_TICK_JOBS links them; ADVANCE_SCHEDULES moves every next_run_at at the end. The tick arithmetic
(zones, DST, missed ticks) is done in Python between the statements, by django_jobq.cron.
"""

from .terms import NOW

# due_schedules: lock the enabled schedules whose next tick has come (next_run_at <= now) or that have
# none yet (NULL: new, edited or re-enabled; the pass only computes their next tick), and read the
# clock the pass computes with. SKIP LOCKED: a row another replica's pass holds is left to it, so
# replicas never wait on each other and never take the same schedule in overlapping passes; a row
# whose pass committed after this statement's snapshot is re-read once locked (READ COMMITTED) and
# dropped by the WHERE, its next_run_at now in the future. %(tried)s: the schedules this pass already
# took in an earlier batch and left due (their enqueue failed): they keep the oldest next_run_at, so
# without this they would come first in every batch and a batch's worth of them would keep the pass
# from every schedule after them. The partial index jobq_schedule_due serves the filter and the order.
DUE_SCHEDULES = f"""
SELECT s.id, s.name, s.task, s.payload::text, s.queue, s.priority, s.cron, s.at, s.timezone,
       s.missed, s.next_run_at, {NOW}
FROM jobq_schedule AS s
WHERE s.enabled AND (s.next_run_at IS NULL OR s.next_run_at <= {NOW}) AND s.id <> ALL(%(tried)s::bigint[])
ORDER BY s.next_run_at NULLS FIRST, s.id
LIMIT %(batch)s
FOR UPDATE OF s SKIP LOCKED
"""

# record_ticks: claim ticks of one schedule; only the ticks this statement inserted come back, and
# only those get a job. The primary key (schedule, tick) refuses a tick already recorded, committed
# or not (an insert of the same pair waits for the other transaction, then does nothing): whatever
# moved next_run_at back (an edit, a restored backup, two clocks), a tick is published once.
RECORD_TICKS = f"""
INSERT INTO jobq_schedule_tick (schedule, tick, published_at)
SELECT %(name)s, t.tick, {NOW} FROM unnest(%(ticks)s::timestamptz[]) AS t(tick)
ON CONFLICT (schedule, tick) DO NOTHING
RETURNING tick
"""

# set_tick_jobs: record which job each tick published (NULL: its dedupe key was already taken). The
# rows were inserted by this transaction, so nobody else can hold them.
SET_TICK_JOBS = """
UPDATE jobq_schedule_tick AS t SET job_id = j.job_id
FROM unnest(%(ticks)s::timestamptz[], %(job_ids)s::bigint[]) AS j(tick, job_id)
WHERE t.schedule = %(name)s AND t.tick = j.tick
"""

# advance_schedules: every locked schedule's next tick and last published tick, in one statement;
# the rows are locked by this transaction's DUE_SCHEDULES, so no one else writes them meanwhile.
ADVANCE_SCHEDULES = """
UPDATE jobq_schedule AS s
SET next_run_at = a.next_run_at, last_tick_at = COALESCE(a.last_tick_at, s.last_tick_at)
FROM unnest(%(ids)s::bigint[], %(nexts)s::timestamptz[], %(lasts)s::timestamptz[])
     AS a(id, next_run_at, last_tick_at)
WHERE s.id = a.id
"""

# prune_ticks: forget the ticks of these schedules recorded longer ago than the retention. A tick is
# recorded after its time, so "tick < cutoff" (a range of the primary key's (schedule, tick) order,
# no scan) holds every row old enough; published_at keeps an old tick back-filled only recently.
PRUNE_TICKS = f"""
DELETE FROM jobq_schedule_tick
WHERE schedule = ANY(%(names)s::text[])
  AND tick < {NOW} - make_interval(secs => %(keep)s)
  AND published_at < {NOW} - make_interval(secs => %(keep)s)
"""

# sync_schedules: write JOBQ["SCHEDULES"] into the table (source "settings"), in name order so that
# replicas starting together lock the rows in the same order (no deadlock); an admin row of the same
# name is taken over. A row whose definition is unchanged is not written at all (the WHERE), so
# restarts cost nothing and never disturb next_run_at; a changed spec, zone or enabled flag clears
# next_run_at, so the next pass restarts the schedule from its next tick after now.
SYNC_SCHEDULES = """
INSERT INTO jobq_schedule AS s
    (name, task, payload, queue, priority, cron, at, timezone, missed, enabled, source)
SELECT w.name, w.task, w.payload::jsonb, w.queue, w.priority, w.cron, w.at, w.timezone, w.missed,
       w.enabled, 'settings'
FROM unnest(%(names)s::text[], %(tasks)s::text[], %(payloads)s::text[], %(queues)s::text[],
            %(priorities)s::smallint[], %(crons)s::text[], %(ats)s::text[], %(timezones)s::text[],
            %(misseds)s::text[], %(enableds)s::boolean[])
     AS w(name, task, payload, queue, priority, cron, at, timezone, missed, enabled)
ORDER BY w.name
ON CONFLICT (name) DO UPDATE
SET task = EXCLUDED.task, payload = EXCLUDED.payload, queue = EXCLUDED.queue,
    priority = EXCLUDED.priority, cron = EXCLUDED.cron, at = EXCLUDED.at,
    timezone = EXCLUDED.timezone, missed = EXCLUDED.missed, enabled = EXCLUDED.enabled,
    source = 'settings',
    next_run_at = CASE
        WHEN (s.cron, s.at, s.timezone, s.enabled)
             IS NOT DISTINCT FROM (EXCLUDED.cron, EXCLUDED.at, EXCLUDED.timezone, EXCLUDED.enabled)
        THEN s.next_run_at END
WHERE (s.task, s.payload, s.queue, s.priority, s.cron, s.at, s.timezone, s.missed, s.enabled, s.source)
      IS DISTINCT FROM (EXCLUDED.task, EXCLUDED.payload, EXCLUDED.queue, EXCLUDED.priority,
                        EXCLUDED.cron, EXCLUDED.at, EXCLUDED.timezone, EXCLUDED.missed,
                        EXCLUDED.enabled, 'settings')
RETURNING s.name
"""

# disable_removed_schedules: a settings schedule no longer in JOBQ["SCHEDULES"] stops (kept, with its
# history, in case it comes back; the admin may delete it). Guarded by enabled: a second replica's
# sync finds nothing to do.
DISABLE_REMOVED_SCHEDULES = """
UPDATE jobq_schedule
SET enabled = false, next_run_at = NULL
WHERE source = 'settings' AND enabled AND NOT (name = ANY(%(names)s::text[]))
RETURNING name
"""
