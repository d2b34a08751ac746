"""SQLite: schedules and their ticks (sql/postgres/schedules.py has the pass and the guarantees).

A pass's transaction (transaction.atomic on the queue's database, IMMEDIATE as the engines reference's settings
make it) holds SQLite's write lock from its start, so passes of several scheduler processes run one
after the other and never take the same schedule at once; the tick table's primary key still
publishes each tick once whatever moves next_run_at back.
"""

from .terms import NOW, each, plus


def _at(param: str, key: str = "a.key") -> str:
    """The element of list parameter ``param`` at the position ``key`` of another list."""
    return f"json_extract(%({param})s, '$[' || {key} || ']')"


DUE_SCHEDULES = f"""
SELECT s.id, s.name, s.task, s.payload, s.queue, s.priority, s.cron, s.at, s.timezone,
       s.missed, s.next_run_at, {NOW}
FROM jobq_schedule AS s
WHERE s.enabled AND (s.next_run_at IS NULL OR s.next_run_at <= {NOW}) AND s.id NOT IN {each("tried")}
ORDER BY s.next_run_at NULLS FIRST, s.id
LIMIT %(batch)s
"""

RECORD_TICKS = f"""
INSERT INTO jobq_schedule_tick (schedule, tick, published_at)
SELECT %(name)s, t.value, {NOW} FROM json_each(%(ticks)s) AS t WHERE true
ON CONFLICT (schedule, tick) DO NOTHING
RETURNING tick
"""

SET_TICK_JOBS = f"""
UPDATE jobq_schedule_tick SET job_id = {_at("job_ids", "t.key")}
FROM json_each(%(ticks)s) AS t
WHERE jobq_schedule_tick.schedule = %(name)s AND jobq_schedule_tick.tick = t.value
"""

ADVANCE_SCHEDULES = f"""
UPDATE jobq_schedule
SET next_run_at = {_at("nexts")}, last_tick_at = COALESCE({_at("lasts")}, last_tick_at)
FROM json_each(%(ids)s) AS a
WHERE jobq_schedule.id = a.value
"""

PRUNE_TICKS = f"""
DELETE FROM jobq_schedule_tick
WHERE schedule IN {each("names")}
  AND tick < {plus(NOW, "-%(keep)s")} AND published_at < {plus(NOW, "-%(keep)s")}
"""

# sync_schedules: JOBQ["SCHEDULES"] into the table, unchanged rows not written (IS NOT: NULL-safe),
# a changed spec, zone or enabled flag clearing next_run_at (as on PostgreSQL).
_COLUMNS = ("name", "task", "payload", "queue", "priority", "cron", "at", "timezone", "missed", "enabled")
_LISTS = ("names", "tasks", "payloads", "queues", "priorities", "crons", "ats", "timezones", "misseds",
          "enableds")  # fmt: skip
_ROWS = ", ".join(
    f"{_at(lst, 'a.key')} AS {col}" if n else f"a.value AS {col}"
    for n, (col, lst) in enumerate(zip(_COLUMNS, _LISTS, strict=True))
)
_S = "jobq_schedule"
SYNC_SCHEDULES = f"""
INSERT INTO jobq_schedule (name, task, payload, queue, priority, cron, at, timezone, missed, enabled, source)
SELECT w.name, w.task, json(w.payload), w.queue, w.priority, w.cron, w.at, w.timezone, w.missed,
       w.enabled, 'settings'
FROM (SELECT {_ROWS} FROM json_each(%(names)s) AS a) AS w WHERE true
ORDER BY w.name
ON CONFLICT (name) DO UPDATE
SET task = excluded.task, payload = excluded.payload, queue = excluded.queue,
    priority = excluded.priority, cron = excluded.cron, at = excluded.at,
    timezone = excluded.timezone, missed = excluded.missed, enabled = excluded.enabled,
    source = 'settings',
    next_run_at = CASE
        WHEN ({_S}.cron, {_S}.at, {_S}.timezone, {_S}.enabled)
             IS (excluded.cron, excluded.at, excluded.timezone, excluded.enabled)
        THEN {_S}.next_run_at END
WHERE ({_S}.task, {_S}.payload, {_S}.queue, {_S}.priority, {_S}.cron, {_S}.at, {_S}.timezone,
       {_S}.missed, {_S}.enabled, {_S}.source)
      IS NOT (excluded.task, excluded.payload, excluded.queue, excluded.priority, excluded.cron,
              excluded.at, excluded.timezone, excluded.missed, excluded.enabled, 'settings')
RETURNING name
"""

DISABLE_REMOVED_SCHEDULES = f"""
UPDATE jobq_schedule SET enabled = 0, next_run_at = NULL
WHERE source = 'settings' AND enabled AND name NOT IN {each("names")}
RETURNING name
"""
