"""PostgreSQL: the statements that insert jobs (enqueue, enqueue_many, enqueue_or_get), and the dedupe
rule they share.

Dedupe keys. At most one row holds each key (the partial unique index jobq_job_dedupe: dedupe_key set
and key_released false): the active job, or after it ends the finished one, for its window
(dedupe_done after DONE, dedupe_dead after DEAD, fixed by the enqueue that created it; NULL counts as
zero). A keyed enqueue first releases the holder whose window is over (the "freed" CTE), then inserts
with ON CONFLICT on that index, in one statement:

- "freed" locks the holder's row. A concurrent enqueue of the same key waits for that lock, re-checks
  its WHERE on the row's new version (READ COMMITTED) and finds it released, so it frees nothing; its
  INSERT then meets the first one's new row in the unique index, waits for that transaction and,
  once it commits, takes the ON CONFLICT branch. If the first rolls back, the holder and the index are
  as they were and the second proceeds. Either way one job per window, decided by the index.
- The INSERT reads its one source row after counting "freed", so the release has run before the row
  is inserted; the released row version is outside the partial index and its old version is one this
  transaction deleted, so the unique check passes it by.
- A holder still inside its window is not freed, and the INSERT conflicts with it.
- Debounce also frees a holder of the same task that is RUNNING or finished, whatever its window: the
  key passes to the new job (the successor), which runs the burst's latest payload; the holder itself
  is not otherwise touched. A PENDING holder is replaced instead, so a key has at most one PENDING job.

Notifications: a statement wakes workers (postgres_terms.wake) only for a job it wrote that is due
now, never for a call that wrote nothing (a skipped duplicate, a full queue) or only pushed a job
back (a debounce): each NOTIFY makes every listening worker claim again.

Only the unkeyed statements (ENQUEUE, ENQUEUE_MANY) leave the dedupe columns out: they cost the
unique index nothing.
"""

from .depth import gate, room
from .terms import DEAD, DONE, NOW, PENDING, wake

# The dedupe index's predicate, repeated in ON CONFLICT so PostgreSQL infers that partial index.
HELD = "dedupe_key IS NOT NULL AND NOT key_released"


def window_over(alias: str) -> str:
    """``alias`` is finished and its key's window has passed (at the window's end exactly, too)."""
    return (
        f"{alias}.status IN ({DONE}, {DEAD}) AND {alias}.finished_at + COALESCE(CASE {alias}.status "
        f"WHEN {DONE} THEN {alias}.dedupe_done ELSE {alias}.dedupe_dead END, interval '0') <= {NOW}"
    )


_COLUMNS = """task, queue, payload, status, priority, run_at, attempts, max_attempts, fence, releases,
    error_count, dedupe_key, dedupe_done, dedupe_dead, concurrency_key, tags, trace_context, errors, created_at,
    fairness_key"""

# One job from scalar parameters; delay is added to run_at (or to now).
_ONE = f"""%(task)s, %(queue)s, %(payload)s::jsonb, {PENDING}, %(priority)s,
    COALESCE(%(run_at)s::timestamptz, {NOW}) + make_interval(secs => %(delay)s), 0, %(max_attempts)s,
    0, 0, 0, %(dedupe_key)s, make_interval(secs => %(dedupe_done)s),
    make_interval(secs => %(dedupe_dead)s), %(concurrency_key)s, %(tags)s::jsonb,
    %(trace_context)s::jsonb, '[]'::jsonb, {NOW}, %(fairness_key)s"""

_FREE_ONE = f"""freed AS (
    UPDATE jobq_job AS h SET key_released = true
    WHERE h.dedupe_key = %(dedupe_key)s AND NOT h.key_released AND {window_over("h")}
    RETURNING h.id
)"""

# debounce: also a holder of the same task that is RUNNING or finished (a PENDING one is replaced).
_FREE_DEBOUNCE = _FREE_ONE.replace(
    f"AND {window_over('h')}",
    f"AND ({window_over('h')} OR (h.status <> {PENDING} AND h.task = %(task)s))",
)

_SKIP = "DO NOTHING"
# replace / debounce: a PENDING holder of the same task takes the new payload, priority and run_at;
# a RUNNING or finished holder, or one of another task, is left alone (no row comes back). ON CONFLICT
# DO UPDATE locks the holder and evaluates this WHERE on its latest version, so a job a worker claimed
# meanwhile is never modified.
_REPLACE = f"""DO UPDATE SET payload = EXCLUDED.payload, priority = EXCLUDED.priority, run_at = EXCLUDED.run_at
    WHERE jobq_job.status = {PENDING} AND jobq_job.task = EXCLUDED.task"""


def _wake_due(alias: str) -> str:
    """Wake workers for job ``alias`` if it is due now (NULL, no job: nobody)."""
    return f"CASE WHEN {alias}.run_at <= {NOW} THEN {wake(f'{alias}.queue')} END"


# enqueue: insert one job without a dedupe key. pg_notify, sent only while a worker may be waiting
# (postgres_terms.wake) and the job is due, is queued in the caller's transaction and delivered on
# commit only, so a rolled-back enqueue wakes nobody. The payload is only the queue name (identical
# notifications in one transaction are folded into one).
ENQUEUE = f"""
WITH job AS (
    INSERT INTO jobq_job ({_COLUMNS}) VALUES ({_ONE})
    RETURNING id, queue, run_at, created_at
)
SELECT id, {_wake_due("job")}, created_at FROM job
"""


# The room a keyed enqueue needs under MAX_DEPTH: none when the key has a live holder (the call is a
# duplicate, answered as such: skipped, or the PENDING holder replaced, which adds no job), else room
# for one more job. For debounce only a PENDING holder, or one of another task, adds no job; a RUNNING
# or finished one of the same task makes way for a successor, which needs room. The queue's depth
# lock (postgres_depth) is taken first either way.
def _keyed_room(*, debounce: bool = False) -> str:
    adds_nothing = f" AND (l.status = {PENDING} OR l.task <> %(task)s)" if debounce else ""
    return f"""room AS (SELECT CASE
    WHEN {gate("%(queue)s")} THEN false
    WHEN EXISTS (SELECT 1 FROM jobq_job AS l WHERE l.dedupe_key = %(dedupe_key)s AND NOT l.key_released
                 AND NOT ({window_over("l")}){adds_nothing}) THEN true
    ELSE {room("%(queue)s", "1", "%(max_depth)s::bigint")} END AS ok)"""


_KEYED_ROOM = _keyed_room()
_ROOM = f"room AS (SELECT {room('%(queue)s', '1', '%(max_depth)s::bigint')} AS ok)"


def _enqueue(*, keyed: bool, on_conflict: str = _SKIP, gated: bool = False, debounce: bool = False) -> str:
    """One job, with a dedupe key (the module's docstring has the rule) and/or under the queue's
    MAX_DEPTH %(max_depth)s (``gated``: postgres_depth). Ungated: a row (id, _, created_at) when
    inserted or replaced, none when the key's holder stays. Gated: always one row (room, id, _,
    created_at), id NULL when nothing was inserted, room false when the queue was full (and nothing
    was written). The column ``_`` is the wake-up's (nothing to read)."""
    ctes = [(_keyed_room(debounce=debounce) if keyed else _ROOM)] if gated else []
    if keyed:  # a full queue frees no key either: nothing is written
        freed = _FREE_DEBOUNCE if debounce else _FREE_ONE
        ctes.append(
            freed.replace("RETURNING", "AND (SELECT ok FROM room)\n    RETURNING") if gated else freed
        )
    source = f"SELECT {_ONE} FROM (SELECT count(*) FROM freed) AS f" if keyed else f"SELECT {_ONE}"
    if gated:
        source += ", room WHERE room.ok" if keyed else " FROM room WHERE room.ok"
    conflict = f"ON CONFLICT (dedupe_key) WHERE {HELD} {on_conflict}" if keyed else ""
    ctes.append(
        f"job AS (\n    INSERT INTO jobq_job ({_COLUMNS}) {source}\n    {conflict}\n"
        "    RETURNING id, queue, run_at, created_at\n)"
    )
    notify = _wake_due("job")  # NULL without a job (LEFT JOIN): no NOTIFY for a call that wrote nothing
    if gated:
        select = f"SELECT room.ok, job.id, {notify}, job.created_at FROM room LEFT JOIN job ON true"
    else:
        select = f"SELECT job.id, {notify}, job.created_at FROM job"
    return "WITH " + ",\n".join(ctes) + "\n" + select


# enqueue_keyed / enqueue_replace / enqueue_debounce: one job with a dedupe key; the _GATED forms for
# a queue with a MAX_DEPTH (ENQUEUE_GATED too, without a key). enqueue_debounce answers None only for
# a holder of another task, or one a worker claimed after the statement's snapshot (its freed CTE saw it
# PENDING, its ON CONFLICT finds it RUNNING): the caller runs it again, and the next snapshot frees it.
ENQUEUE_KEYED = _enqueue(keyed=True)
ENQUEUE_REPLACE = _enqueue(keyed=True, on_conflict=_REPLACE)
ENQUEUE_DEBOUNCE = _enqueue(keyed=True, on_conflict=_REPLACE, debounce=True)
ENQUEUE_GATED = _enqueue(keyed=False, gated=True)
ENQUEUE_KEYED_GATED = _enqueue(keyed=True, gated=True)
ENQUEUE_REPLACE_GATED = _enqueue(keyed=True, on_conflict=_REPLACE, gated=True)
ENQUEUE_DEBOUNCE_GATED = _enqueue(keyed=True, on_conflict=_REPLACE, gated=True, debounce=True)


# enqueue_or_get: ENQUEUE_KEYED, and when the key's holder stays, that holder: (id, created,
# created_at). The holder is read from the statement's snapshot, leaving out a holder whose window is
# over (the one "freed" released, or one a concurrent enqueue is releasing); a holder committed after
# the snapshot is not visible either, and then no row comes back and the caller runs the statement again.
# ENQUEUE_OR_GET_GATED inserts only when the queue's MAX_DEPTH leaves room; when no row comes back
# the caller checks the room (DEPTH_FULL) before trying again.
def _enqueue_or_get(gated: bool) -> str:
    if gated:
        room_cte = _KEYED_ROOM + ", "
        freed, where = (
            _FREE_ONE.replace("RETURNING", "AND (SELECT ok FROM room)\n    RETURNING"),
            ", room WHERE room.ok",
        )
    else:
        room_cte, freed, where = "", _FREE_ONE, ""
    return f"""
WITH {room_cte}{freed}, job AS (
    INSERT INTO jobq_job ({_COLUMNS}) SELECT {_ONE} FROM (SELECT count(*) FROM freed) AS f{where}
    ON CONFLICT (dedupe_key) WHERE {HELD} DO NOTHING
    RETURNING id, queue, created_at
), woken AS (
    SELECT {wake("queue")} FROM job
)
SELECT id, true, created_at FROM job, (SELECT count(*) FROM woken) AS w
UNION ALL
SELECT h.id, false, h.created_at FROM jobq_job AS h
WHERE h.dedupe_key = %(dedupe_key)s AND NOT h.key_released AND NOT ({window_over("h")})
  AND NOT EXISTS (SELECT 1 FROM job)
"""


ENQUEUE_OR_GET = _enqueue_or_get(gated=False)
ENQUEUE_OR_GET_GATED = _enqueue_or_get(gated=True)

# enqueue_many: many jobs from parallel arrays, sent in binary (one round trip, no per-element
# quoting), one notification per distinct queue with a job due now. ENQUEUE_MANY is for batches
# without dedupe keys; the keyed forms free the holders of the batch's keys first (the caller has
# already dropped repeats of a key inside the batch: the first wins, and DO UPDATE could not touch a
# row twice), and insert in key order: every keyed batch then takes its keys' locks (the holders'
# rows, the index entries it waits on) in the same order, so two batches sharing keys queue behind
# each other, never deadlock.
_BATCH = """unnest(%(tasks)b::text[], %(queues)b::text[], %(payloads)b::text[], %(priorities)b::smallint[],
                %(run_ats)b::timestamptz[], %(max_attempts)b::int[], %(dedupe_keys)b::text[],
                %(dedupe_dones)b::float8[], %(dedupe_deads)b::float8[], %(concurrency_keys)b::text[],
                %(tags)b::text[], %(trace_contexts)b::text[], %(fairness_keys)b::text[])
         AS u(task, queue, payload, priority, run_at, max_attempts, dedupe_key, dedupe_done, dedupe_dead,
              concurrency_key, tags, trace_context, fairness_key)"""
_MANY = f"""
    SELECT u.task, u.queue, u.payload::jsonb, {PENDING}, u.priority, COALESCE(u.run_at, {NOW}), 0,
           u.max_attempts, 0, 0, 0, u.dedupe_key, make_interval(secs => u.dedupe_done),
           make_interval(secs => u.dedupe_dead), u.concurrency_key, u.tags::jsonb,
           u.trace_context::jsonb, '[]'::jsonb, {NOW}, u.fairness_key
    FROM {_BATCH}"""
_WOKEN = f"""woken AS (
    SELECT {wake("queue")} FROM (SELECT DISTINCT queue FROM job WHERE run_at <= {NOW}) AS q
)
SELECT id FROM job, (SELECT count(*) FROM woken) AS w"""
ENQUEUE_MANY = f"""
WITH job AS (
    INSERT INTO jobq_job ({_COLUMNS}) {_MANY}
    RETURNING id, queue, run_at
), {_WOKEN}
"""
_FREED_MANY = f"""freed AS (
    UPDATE jobq_job AS h SET key_released = true
    WHERE h.dedupe_key = ANY(%(keys)s::text[]) AND NOT h.key_released AND {window_over("h")}
    RETURNING h.id
)"""
ENQUEUE_MANY_KEYED = f"""
WITH {_FREED_MANY}, job AS (
    INSERT INTO jobq_job ({_COLUMNS}) {_MANY}, (SELECT count(*) FROM freed) AS f
    ORDER BY u.dedupe_key
    ON CONFLICT (dedupe_key) WHERE {HELD} DO NOTHING
    RETURNING id, queue, run_at
), {_WOKEN}
"""
# enqueue_many with on_duplicate="replace": the PENDING holders of the batch's keys (of the same task)
# are locked in key order and take the new payload, priority and run_at; then the other jobs are
# inserted as ENQUEUE_MANY_KEYED does (a replaced holder conflicts: nothing inserted for it). Unlike
# ON CONFLICT DO UPDATE, which locks the conflicting row whatever its status, this never locks a
# RUNNING holder, so it never waits for a worker's batched complete while holding rows that worker
# needs (a deadlock); a worker never waits for it, as its claim skips locked rows.
ENQUEUE_MANY_REPLACE = f"""
WITH {_FREED_MANY}, holders AS MATERIALIZED (
    SELECT id FROM jobq_job
    WHERE dedupe_key = ANY(%(keys)s::text[]) AND NOT key_released AND status = {PENDING}
    ORDER BY dedupe_key
    FOR UPDATE
), replaced AS (
    UPDATE jobq_job AS h
    SET payload = u.payload::jsonb, priority = u.priority, run_at = COALESCE(u.run_at, {NOW})
    FROM {_BATCH}
    WHERE h.id = ANY(ARRAY(SELECT id FROM holders)) AND h.dedupe_key = u.dedupe_key
      AND h.status = {PENDING} AND h.task = u.task
    RETURNING h.id, h.queue, h.run_at
), inserted AS (
    INSERT INTO jobq_job ({_COLUMNS}) {_MANY}, (SELECT count(*) FROM freed) AS f,
        (SELECT count(*) FROM replaced) AS r
    ORDER BY u.dedupe_key
    ON CONFLICT (dedupe_key) WHERE {HELD} DO NOTHING
    RETURNING id, queue, run_at
), job AS (
    SELECT id, queue, run_at FROM replaced UNION ALL SELECT id, queue, run_at FROM inserted
), {_WOKEN}
"""
