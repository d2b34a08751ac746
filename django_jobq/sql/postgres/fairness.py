"""PostgreSQL: fair queues (JOBQ["QUEUES"][q]["FAIR"]). The claim's fair selection, the per-key state
it reads and writes (jobq_fair_key, kept by the triggers of migration 0013), and the reaper's prune.

A fair queue's claim serves one priority lane at a time, the lowest with a due job (priority first),
and within it the keys in weighted round-robin by virtual time (start-time fair queueing): a key's
n-th job of this claim starts at vtime + n / weight, and the claim takes the jobs that start first.
After the claim, each key it took from moves on by (jobs taken) / weight. So a key with a million due
jobs and a key with one alternate, and a key of weight 2 starts twice as many jobs as one of weight 1.

Cost: the claim walks the lane's keys in vtime order (jobq_fair_key_round, one index probe per key:
a recursive walk, so that no plan reads and sorts every key's row) and, for each, its first
due jobs (jobq_job_fair: queue, fairness_key, priority, run_at, id; PENDING with a key), locking them
FOR UPDATE SKIP LOCKED as it reads: at most %(limit)s keys, and more jobs of each only while fewer keys
than %(limit)s have due jobs (then at most %(limit)s - 1 more of each), whatever the backlog. Keys with only future jobs in the lane are read past (one index probe each). The jobs locked
but not taken (the other keys' later jobs) are skipped by a concurrent claim until this one commits,
as for a claim over several queues.

When the fair walk finds nothing (jobs without a fairness key, enqueued before the queue was made
fair; or a lane whose every due job another claim holds), the claim takes the queue's due jobs in the
plain order instead (postgres_pick._due), so no job ever waits on its key's state.
"""

from .jobs import _COMPLETE_AND_CLAIM, _TAKE
from .pick import (
    _CAP_COLUMNS,
    _CAPPED_LIMIT,
    _COLUMNS,
    _DUE_NOW,
    _HAS_ROOM,
    _LIMIT,
    _due,
    _held_back,
    _lanes,
    _picked,
    _within_caps,
)
from .terms import PENDING

# A key's weight: its own (%(fair_keys)s / %(fair_weights)s, sorted parallel arrays), else the queue's
# default %(fair_weight)s. The arrays are init plans: read once per statement.
_KEYS, _WEIGHTS = "(SELECT %(fair_keys)s::text[])", "(SELECT %(fair_weights)s::float8[])"


def _weight(key: str) -> str:
    return (
        f"COALESCE((SELECT w.weight FROM unnest({_KEYS}, {_WEIGHTS}) AS w(key, weight) WHERE w.key = {key}"
        " LIMIT 1), (SELECT %(fair_weight)s::float8))"
    )


def _fair(queue: str, limit: str = _LIMIT, rows: str = "", columns: str = _COLUMNS) -> str:
    """The fair selection of one queue (as postgres_pick._due: ``limit``, ``rows``, ``columns``).
    lanes: the queue's priority values (a skip scan of the claim index, as _due); lane: the lowest
    with a due job. keys: the lane's keys in (vtime, key) order, one probe of jobq_fair_key_round
    each, as many as heads asks for. heads: each key's first due job, until ``limit`` keys gave
    one. more: when fewer keys than ``limit`` gave one, each of those keys' next due jobs (at most
    ``limit`` - 1), their start n / weight after the key's vtime. fair: the ``limit``
    that start first. With ``limit`` keys or more, a claim takes one job of each of the first
    ``limit``: a heavier key is served more often across claims (its vtime moves on less), not
    several times within one."""
    also = f" AND {rows}" if rows else ""
    names = [c.strip() for c in columns.split(",")]
    of_more = ", ".join(f"m.{c}" for c in names)
    return f"""WITH RECURSIVE {_lanes(queue)}, lane AS MATERIALIZED (
        SELECT l.priority FROM lanes AS l
        WHERE l.priority IS NOT NULL AND EXISTS (
            SELECT 1 FROM jobq_job
            WHERE status = {PENDING} AND queue = {queue} AND priority = l.priority AND {_DUE_NOW})
        LIMIT 1
    ), keys(priority, key, vtime) AS (
        (SELECT f.priority, f.key, f.vtime FROM lane
         CROSS JOIN LATERAL (
            SELECT f.priority, f.key, f.vtime FROM jobq_fair_key AS f
            WHERE f.queue = {queue} AND f.priority = lane.priority ORDER BY f.vtime, f.key LIMIT 1) AS f)
        UNION ALL
        SELECT n.priority, n.key, n.vtime FROM keys AS k
        CROSS JOIN LATERAL (
            SELECT f.priority, f.key, f.vtime FROM jobq_fair_key AS f
            WHERE f.queue = {queue} AND f.priority = k.priority AND (f.vtime, f.key) > (k.vtime, k.key)
            ORDER BY f.vtime, f.key LIMIT 1) AS n
    ), heads AS MATERIALIZED (
        SELECT k.key, k.vtime, h.* FROM keys AS k
        CROSS JOIN LATERAL (
            SELECT {columns} FROM jobq_job
            WHERE status = {PENDING} AND queue = {queue} AND fairness_key = k.key AND priority = k.priority
              AND {_DUE_NOW}{also}
            ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) AS h
        LIMIT {limit}
    ), more AS MATERIALIZED (
        SELECT hd.key, hd.vtime + m.n / {_weight("hd.key")} AS vstart, {of_more} FROM heads AS hd
        CROSS JOIN LATERAL (
            SELECT x.*, row_number() OVER (ORDER BY x.run_at, x.id) AS n FROM (
                SELECT {columns} FROM jobq_job
                WHERE status = {PENDING} AND queue = {queue} AND fairness_key = hd.key
                  AND priority = hd.priority AND {_DUE_NOW} AND (run_at, id) > (hd.run_at, hd.id){also}
                ORDER BY run_at, id
                LIMIT CASE WHEN (SELECT count(*) FROM heads) < {limit} THEN {limit} - 1 ELSE 0 END
                FOR UPDATE SKIP LOCKED) AS x) AS m
    ), fair AS MATERIALIZED (
        SELECT * FROM (
            SELECT key, vtime AS vstart, {columns} FROM heads
            UNION ALL
            SELECT key, vstart, {columns} FROM more) AS c
        ORDER BY vstart, key, run_at, id
        LIMIT {limit}
    )
    SELECT {columns} FROM fair
    UNION ALL
    SELECT * FROM ({_due(queue, "", limit, rows, columns)}) AS plain WHERE NOT EXISTS (SELECT 1 FROM fair)"""


# The keys the claim took jobs of move on by (jobs taken) / weight. Their rows are locked first, in
# (priority, key) order (ORDER BY comes before the lock), so two claims that take from the same keys
# lock them in the same order and never deadlock; a claim waits only for another claim of the same
# keys (a short transaction): an enqueue's KEY SHARE lock does not conflict with FOR NO KEY UPDATE.
# The jobs taken are read by primary key from the statement's snapshot (PENDING there: the UPDATE
# that takes them is a sibling).
_SPEND = f"""fair_taken AS MATERIALIZED (
    SELECT j.priority, j.fairness_key AS key, count(*)::float8 AS n FROM jobq_job AS j
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.fairness_key IS NOT NULL
    GROUP BY j.priority, j.fairness_key
), fair_locked AS MATERIALIZED (
    SELECT f.priority, f.key, t.n FROM jobq_fair_key AS f
    JOIN fair_taken AS t ON t.priority = f.priority AND t.key = f.key
    WHERE f.queue = %(queue)s
    ORDER BY f.priority, f.key
    FOR NO KEY UPDATE OF f
), fair_spent AS (
    UPDATE jobq_fair_key AS f SET vtime = f.vtime + l.n / {_weight("f.key")}
    FROM fair_locked AS l WHERE f.queue = %(queue)s AND f.priority = l.priority AND f.key = l.key
)"""

_PICK_FAIR = f"{_picked(_fair('%(queue)s'))},\n{_SPEND}"
_PICK_FAIR_CAPPED = f"{_picked(_fair('%(queue)s', limit=_CAPPED_LIMIT))},\n{_SPEND}"
_PICK_FAIR_TASK_CAPS = f"{_within_caps(_fair('%(queue)s', rows=_HAS_ROOM, columns=_CAP_COLUMNS))},\n{_SPEND}"
_PICK_FAIR_CAPPED_TASK_CAPS = f"{_within_caps(_fair('%(queue)s', limit=_CAPPED_LIMIT, rows=_HAS_ROOM, columns=_CAP_COLUMNS))},\n{_SPEND}"

# claim_batch of one fair queue; and the worker's complete_and_claim forms (postgres_jobs), for a fair
# queue, capped (after CAP_LOCK), with task caps, or both.
CLAIM_FAIR = f"WITH {_PICK_FAIR}\n{_TAKE}"
COMPLETE_AND_CLAIM_FAIR = _COMPLETE_AND_CLAIM.format(pick=_PICK_FAIR, held="")
COMPLETE_AND_CLAIM_FAIR_CAPPED = _COMPLETE_AND_CLAIM.format(pick=_PICK_FAIR_CAPPED, held="")
COMPLETE_AND_CLAIM_FAIR_TASK_CAPS = _COMPLETE_AND_CLAIM.format(
    pick=_PICK_FAIR_TASK_CAPS, held=f"{_held_back(_LIMIT)} AS held_back, "
)
COMPLETE_AND_CLAIM_FAIR_CAPPED_TASK_CAPS = _COMPLETE_AND_CLAIM.format(
    pick=_PICK_FAIR_CAPPED_TASK_CAPS, held=f"{_held_back(_CAPPED_LIMIT)} AS held_back, "
)

# The reaper's prune of the keys left with no PENDING job, in two statements of one transaction (see
# migration 0013): FAIR_PRUNE_LOCK locks up to %(limit)s candidates FOR UPDATE SKIP LOCKED (a key an
# uncommitted job holds, or a claim is moving on, is skipped), then FAIR_PRUNE deletes those that,
# in its own later snapshot, still have no PENDING job. A job that becomes PENDING meanwhile waits
# for the prune's commit (its trigger's KEY SHARE lock) and then creates the row again.
_IDLE = f"""NOT EXISTS (
    SELECT 1 FROM jobq_job AS j
    WHERE j.status = {PENDING} AND j.queue = f.queue AND j.fairness_key = f.key AND j.priority = f.priority)"""
FAIR_PRUNE_LOCK = f"""
SELECT f.queue, f.priority, f.key FROM jobq_fair_key AS f WHERE {_IDLE}
LIMIT %(limit)s FOR UPDATE OF f SKIP LOCKED
"""
FAIR_PRUNE = f"""
DELETE FROM jobq_fair_key AS f
USING unnest(%(queues)s::text[], %(priorities)s::smallint[], %(keys)s::text[]) AS d(queue, priority, key)
WHERE f.queue = d.queue AND f.priority = d.priority AND f.key = d.key AND {_IDLE}
"""

# The reaper's vacuum of the key rows. Every claim of a fair queue writes a new version of each key
# row it moved on (vtime is in jobq_fair_key_round, so never a HOT update) and leaves the old one's
# index entry behind, below every live vtime: each claim's walk starts by reading past all of them
# (about 7 index pages per 1,000 jobs claimed) until a vacuum removes them, and autovacuum visits a
# table at most every autovacuum_naptime (a minute by default). FAIR_KEYS_DEAD reads the statistics
# collector's count of dead versions (no lock, no row of the table read); past the manager's bound the
# reaper runs VACUUM_FAIR_KEYS, outside any transaction. SKIP_LOCKED: a vacuum already running (or
# a lock a migration holds) makes it skip the table, never wait. A vacuum takes SHARE UPDATE
# EXCLUSIVE, which no claim, enqueue or prune conflicts with. Its third column says whether this user
# may vacuum the table at all (its owner's rights, the database owner's, a superuser's, or from
# PostgreSQL 17 the MAINTAIN privilege; a CASE, so older servers never evaluate that privilege's
# name): a VACUUM it may not run is no error, only a warning in the server's log on every pass.
FAIR_KEYS_DEAD = """
SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
FROM pg_class AS c
JOIN pg_database AS d ON d.datname = current_database()
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = 'jobq_fair_key'::regclass
"""
VACUUM_FAIR_KEYS = "VACUUM (SKIP_LOCKED) jobq_fair_key"
