"""PostgreSQL: the rate-limit statements (django_jobq.ratelimit). Each runs alone in autocommit on the
rate limiter's own connection, so a row lock it takes lasts one statement, never a caller's transaction.

An acquire is one statement returning (granted, wait): wait is the seconds until the permits asked for
may come, for acquire(wait=...) to sleep on. It has two steps:

  seen:  a plain read of the key's row as the statement's snapshot shows it. If that says there is
         not enough, the acquire is refused there and then, with no lock and no write (so no commit to
         flush): a refusal is always safe, and an older version of the row never shows less room than
         the newest one (permits only use room up; time only frees it), so this refuses nothing the
         locked step would grant, up to the clock readings of two statements racing (a retry's worth).
  taken: otherwise INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE, which alone grants.

Why N parallel acquires of one key never pass more than its limit: the key is the table's primary key,
so there is one row per key. When the row does not exist yet, one insert wins the unique index; the
others wait for it to commit and then take the DO UPDATE path. DO UPDATE locks the existing row
(waiting for whoever holds it) and evaluates its SET and WHERE on the row's latest committed version,
not on the statement's snapshot. So the grants of one key happen one after another, each sees every
permit granted before it, and each grants only if what is left covers its n; a grant writes the new
state, a refusal (the WHERE is false) writes nothing and RETURNs no row. Keys never share a row, so they
never share a count or wait for each other.

Time is NOW (the database clock, or the bound %(now)s of the "python" clock). In autocommit now() is
the start of the statement, which can be earlier than the time a competitor recorded while this one
waited for the row lock; so each key's time never goes back: a grant counts at the later of NOW and
the last time recorded in the row.
"""

from .postgres_terms import NOW

# -- token bucket ------------------------------------------------------------------------------------
# The tokens a bucket row b holds now: what it held at updated_at, plus %(fill)s tokens per second since
# then (none if now is earlier than updated_at), capped at the bucket's size.
_REFILLED = (
    "LEAST(%(burst)s::float8, b.tokens + %(fill)s::float8 * "
    f"GREATEST(0, extract(epoch FROM {NOW} - b.updated_at)::float8))"
)
_UPDATED = f"GREATEST(b.updated_at, {NOW})"
_N = "%(n)s::int"

# bucket_acquire: take %(n)s tokens from the key's bucket if it holds them. A new bucket starts full
# (%(burst)s tokens). A grant stores the tokens left, the time they were counted and idle_at, when the
# bucket is full again (from then on the row says no more than a missing row would). wait: seconds until
# the snapshot's bucket refills to n (0 when the refusal came from the locked step: try again at once).
BUCKET_ACQUIRE = f"""
WITH seen AS (
    SELECT {_REFILLED} AS tokens FROM jobq_rate_bucket AS b WHERE b.key = %(key)s
), taken AS (
    INSERT INTO jobq_rate_bucket AS b (key, tokens, updated_at, idle_at)
    SELECT %(key)s, %(burst)s::float8 - {_N}, {NOW}, {NOW} + make_interval(secs => {_N} / %(fill)s::float8)
    WHERE NOT EXISTS (SELECT FROM seen WHERE seen.tokens < {_N})
    ON CONFLICT (key) DO UPDATE
    SET tokens = {_REFILLED} - {_N},
        updated_at = {_UPDATED},
        idle_at = {_UPDATED} + make_interval(secs => (%(burst)s::float8 - ({_REFILLED} - {_N}))
                                                     / %(fill)s::float8)
    WHERE {_REFILLED} >= {_N}
    RETURNING 1
)
SELECT EXISTS (SELECT FROM taken),
       COALESCE((SELECT GREATEST(0, ({_N} - tokens) / %(fill)s::float8) FROM seen), 0)
"""

# -- sliding window ----------------------------------------------------------------------------------
# The window's log is a JSON array of the epoch microseconds of its permits, oldest first (one number per
# permit). The key's time, _AT, is the later of now and the newest stamp, so stamps are appended in
# order and a stamp a competitor dropped as expired is expired for every later grant too. A stamp s is
# live at time t while s > t - window. Every permit that shares a half-open window of %(window_us)s
# microseconds with a permit granted at t is live at t, so counting the live stamps keeps every such
# window at %(limit)s permits or fewer.
_NOW_US = f"(extract(epoch FROM {NOW}) * 1000000)::bigint"
_AT = f"GREATEST({_NOW_US}, COALESCE((w.stamps ->> -1)::bigint, 0))"
_LIVE = (
    "jsonb_path_query_array(w.stamps, '$[*] ? (@ > $cutoff)', "
    f"jsonb_build_object('cutoff', {_AT} - %(window_us)s::bigint))"
)
_WINDOW = "%(window_us)s::bigint * interval '1 microsecond'"


def _stamps(at: str) -> str:
    """%(n)s stamps of time ``at``, as a JSON array."""
    return f"to_jsonb(array_fill({at}, ARRAY[{_N}]))"


# window_acquire: add %(n)s permits stamped with the key's time to its log if the live ones leave room
# under %(limit)s. A grant also drops the stamps that left the window, so the log never holds more than
# %(limit)s entries, and moves idle_at to when its newest stamp leaves the window (then the row may be
# pruned). wait: seconds until the k-th oldest live stamp of the snapshot leaves the window, where
# k = live + n - limit (the log is in time order, so that is its element k - 1); 0 if there is room.
WINDOW_ACQUIRE = f"""
WITH seen AS (
    SELECT jsonb_array_length(l.live) + {_N} - %(limit)s::int AS over,
           ((l.live ->> (jsonb_array_length(l.live) + {_N} - %(limit)s::int - 1))::bigint
            + %(window_us)s::bigint - {_NOW_US}) / 1e6::float8 AS wait
    FROM jobq_rate_window AS w, LATERAL (SELECT {_LIVE} AS live) AS l
    WHERE w.key = %(key)s
), taken AS (
    INSERT INTO jobq_rate_window AS w (key, stamps, idle_at)
    SELECT %(key)s, {_stamps(_NOW_US)}, {NOW} + {_WINDOW}
    WHERE NOT EXISTS (SELECT FROM seen WHERE seen.over > 0)
    ON CONFLICT (key) DO UPDATE
    SET stamps = {_LIVE} || {_stamps(_AT)},
        idle_at = GREATEST(w.idle_at, {NOW} + {_WINDOW})
    WHERE jsonb_array_length({_LIVE}) + {_N} <= %(limit)s::int
    RETURNING 1
)
SELECT EXISTS (SELECT FROM taken),
       COALESCE((SELECT GREATEST(0, wait) FROM seen WHERE over > 0), 0)
"""

# -- pruning -----------------------------------------------------------------------------------------
# prune_buckets / prune_windows: delete up to %(batch)s rows that say no more than a missing row would
# (a full bucket, a log with no live permit: idle_at has passed). The rows are picked FOR UPDATE SKIP
# LOCKED, so pruning never waits for an acquire; a row an acquire updated after this statement's
# snapshot is re-checked on its new version and kept. An acquire waiting for a row pruned under it
# inserts the key afresh, which is what the pruned row said. There is no index on idle_at, on purpose:
# acquires rewrite idle_at, and an index on it would make every one of those updates non-HOT.
PRUNE_BUCKETS = f"""
DELETE FROM jobq_rate_bucket
WHERE key = ANY(ARRAY(
    SELECT key FROM jobq_rate_bucket WHERE idle_at <= {NOW} LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)) AND idle_at <= {NOW}
"""

PRUNE_WINDOWS = f"""
DELETE FROM jobq_rate_window
WHERE key = ANY(ARRAY(
    SELECT key FROM jobq_rate_window WHERE idle_at <= {NOW} LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)) AND idle_at <= {NOW}
"""
