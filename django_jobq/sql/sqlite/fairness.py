"""SQLite: fair queues (JOBQ["QUEUES"][q]["FAIR"]), under the names of sql/postgres/fairness.py, with
the same selection: the lowest priority lane with a due job; in it, the keys in vtime order
(jobq_fair_key, kept by the triggers of migration 0013) that have a due job, at most %(limit)s of them;
each key's first %(limit)s due jobs, its n-th (from 0) starting at vtime + n / weight; the %(limit)s
that start first are taken, and each key moves on by (jobs taken) / weight. When that finds nothing
(jobs without a fairness key), the queue's due jobs are taken in the plain order.

SQLite has no writable CTE, so a claim is a Script under BEGIN IMMEDIATE (sqlite_engine): the pick is
written to a per-connection TEMP table, then the keys' vtime is moved on and the jobs taken, both from
that table. One writer at a time: nothing changes between the steps, no lock is needed.

Cost: the lane is the first due entry of the claim index in priority order (entries of lower lanes'
future jobs are read past); the keys are read in vtime order (jobq_fair_key_round), each probed for a
due job in the fair index, until %(limit)s have one (keys with only future jobs are read past); each
of those keys reads at most %(limit)s index entries of its due jobs. So, as on PostgreSQL, a claim
reads what it serves, not the backlog. The weights (%(fair_keys)s / %(fair_weights)s, JSON arrays)
are read once per claim, and looked up per key served (an automatic index, or, with no ANALYZE
statistics, a scan of them): a queue with thousands of weighted keys pays for them on every claim.
"""

from ..engine import Script, Unsupported
from .jobs import CLAIMED_COLUMNS, COMPLETE_MANY, _completed_then_claimed, _in_claim_order
from .terms import NOW, PENDING, RUNNING, plus


def _due(alias: str = "") -> str:
    """``alias``'s row is a due PENDING job of the queue."""
    at = f"{alias}." if alias else ""
    return f"{at}status = {PENDING} AND {at}queue = %(queue)s AND {at}run_at <= {NOW}"


# The pick of this claim: job id, its lane, key and weight. A TEMP table is the connection's own (no
# other connection sees it), emptied before each use.
_PICK_TABLE = """CREATE TEMP TABLE IF NOT EXISTS jobq_fair_pick (
    id INTEGER PRIMARY KEY, priority INTEGER NOT NULL, key TEXT NOT NULL, weight REAL NOT NULL)"""
_PICK_EMPTY = "DELETE FROM temp.jobq_fair_pick"

# lane: the lowest priority with a due job (the claim index in the plain claim's order). heads: the
# lane's keys with a due job, by vtime, at most %(limit)s, each with its weight: its own from the
# sorted parallel arrays %(fair_keys)s / %(fair_weights)s (json_each's key is the position in both,
# read once per claim), else %(fair_weight)s. jobs: each head's first
# %(limit)s due jobs (a correlated subquery per key on the fair index), numbered from 0 in (run_at, id)
# order, the n-th starting at vtime + n / weight. Then the %(limit)s that start first.
_PICK = f"""INSERT INTO temp.jobq_fair_pick (id, priority, key, weight)
WITH weights(key, weight) AS MATERIALIZED (
    SELECT k.value, json_extract(%(fair_weights)s, '$[' || k.key || ']') FROM json_each(%(fair_keys)s) AS k
), lane(priority) AS MATERIALIZED (
    SELECT priority FROM jobq_job
    WHERE id = (SELECT id FROM jobq_job WHERE {_due()} ORDER BY priority, run_at, id LIMIT 1)
), heads AS MATERIALIZED (
    SELECT f.priority, f.key, f.vtime,
           COALESCE((SELECT w.weight FROM weights AS w WHERE w.key = f.key), %(fair_weight)s) AS weight
    FROM lane JOIN jobq_fair_key AS f ON f.queue = %(queue)s AND f.priority = lane.priority
    WHERE EXISTS (
        SELECT 1 FROM jobq_job AS j WHERE {_due("j")} AND j.fairness_key = f.key AND j.priority = f.priority)
    ORDER BY f.vtime, f.key LIMIT %(limit)s
), jobs AS (
    SELECT h.priority, h.key, h.weight, j.id, j.run_at,
           h.vtime + (row_number() OVER (PARTITION BY h.key ORDER BY j.run_at, j.id) - 1) * 1.0 / h.weight
               AS vstart
    FROM heads AS h JOIN jobq_job AS j ON j.id IN (
        SELECT d.id FROM jobq_job AS d
        WHERE {_due("d")} AND d.fairness_key = h.key AND d.priority = h.priority
        ORDER BY d.run_at, d.id LIMIT %(limit)s)
)
SELECT id, priority, key, weight FROM jobs ORDER BY vstart, key, run_at, id LIMIT %(limit)s"""

# The keys taken from move on by (jobs taken) / weight.
_SPEND = """UPDATE jobq_fair_key SET vtime = vtime + t.n * 1.0 / t.weight
FROM (SELECT priority, key, count(*) AS n, max(weight) AS weight FROM temp.jobq_fair_pick
      GROUP BY priority, key) AS t
WHERE jobq_fair_key.queue = %(queue)s AND jobq_fair_key.priority = t.priority AND jobq_fair_key.key = t.key"""

# The picked jobs become RUNNING for this worker (as sqlite_jobs._claim: the one writer, and the
# status guard, so no job is taken twice); when the pick is empty, the queue's due jobs in the plain
# order (priority, run_at, id) instead.
_TAKE = f"""UPDATE jobq_job
SET status = {RUNNING}, worker_id = %(worker_id)s, attempts = attempts + 1, fence = fence + 1,
    started_at = {NOW}, lease_until = {plus(NOW, "%(lease)s")}
WHERE id IN (
    SELECT id FROM temp.jobq_fair_pick
    UNION ALL
    SELECT id FROM (SELECT id FROM jobq_job WHERE {_due()} ORDER BY priority, run_at, id LIMIT %(limit)s)
    WHERE NOT EXISTS (SELECT 1 FROM temp.jobq_fair_pick)
) AND status = {PENDING}
RETURNING {", ".join(CLAIMED_COLUMNS)}"""

_CLAIM = (_PICK_TABLE, _PICK_EMPTY, _PICK, _SPEND, _TAKE)

# claim_batch of one fair queue; complete_and_claim for one (COMPLETE_MANY first, as sqlite_jobs).
CLAIM_FAIR = Script(_CLAIM, _in_claim_order)
COMPLETE_AND_CLAIM_FAIR = Script((COMPLETE_MANY, *_CLAIM), _completed_then_claimed)

# Not on SQLite (Capabilities): queue and task caps, so neither their fair forms.
COMPLETE_AND_CLAIM_FAIR_CAPPED = Unsupported("queue_caps", 'JOBQ["QUEUES"][...]["MAX_RUNNING"]')
COMPLETE_AND_CLAIM_FAIR_TASK_CAPS = Unsupported("task_caps", "@task(max_running=...)")
COMPLETE_AND_CLAIM_FAIR_CAPPED_TASK_CAPS = Unsupported("task_caps", "@task(max_running=...)")

# The reaper's prune of keys with no PENDING job: FAIR_PRUNE_LOCK reads up to %(limit)s of them (no
# lock needed: one writer at a time), FAIR_PRUNE deletes those given that still have none (the check
# repeated, as the manager may run the two in separate write transactions).
_IDLE = f"""NOT EXISTS (
    SELECT 1 FROM jobq_job AS j
    WHERE j.status = {PENDING} AND j.queue = jobq_fair_key.queue AND j.fairness_key = jobq_fair_key.key
      AND j.priority = jobq_fair_key.priority)"""
FAIR_PRUNE_LOCK = f"SELECT queue, priority, key FROM jobq_fair_key WHERE {_IDLE} LIMIT %(limit)s"
FAIR_PRUNE = f"""
DELETE FROM jobq_fair_key
WHERE (queue, priority, key) IN (
    SELECT json_extract(%(queues)s, '$[' || k.key || ']'), json_extract(%(priorities)s, '$[' || k.key || ']'),
           k.value
    FROM json_each(%(keys)s) AS k)
  AND {_IDLE}
"""

# SQLite writes a row's new version in place: a claim leaves no dead version of a key row, so the
# reaper has nothing to vacuum (FAIR_KEYS_DEAD: none; VACUUM_FAIR_KEYS is never run).
FAIR_KEYS_DEAD = "SELECT 0, 0, 1"
VACUUM_FAIR_KEYS = "SELECT 0"
