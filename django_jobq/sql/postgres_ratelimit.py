"""PostgreSQL: the rate-limit statements (django_jobq.ratelimit). Each runs alone in autocommit on the
rate limiter's own connection, so a row lock it takes lasts one statement, never a caller's transaction.

Why N parallel acquires of one key never pass more than its limit: the key is the table's primary key,
so there is one row per key, and every acquire is one INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE.
When the row does not exist yet, one insert wins the unique index; the others wait for it to commit and
then take the DO UPDATE path. DO UPDATE locks the existing row (waiting for whoever holds it) and
evaluates its SET and WHERE on the row's latest committed version, not on the statement's snapshot.
So the acquires of one key run one after another, each sees every permit granted before it, and each
grants only if what is left covers its n: a grant writes the new state, a refusal (the WHERE is false)
writes nothing and RETURNs no row. Nothing is read outside that locked row, so no stale snapshot can
count a permit twice. Keys never share a row, so they never share a count or wait for each other.

Time is NOW (the database clock, or the bound %(now)s of the "python" clock). In autocommit now() is
the start of the statement, which may be earlier than the time of a permit a competitor wrote while
this statement waited for the row lock; both primitives read such a "future" permit conservatively.
"""

from .postgres_terms import NOW

# -- token bucket ------------------------------------------------------------------------------------
# The tokens a bucket row b holds now: what it held at updated_at, plus %(fill)s tokens per second since
# then (never a negative refill if now is earlier than updated_at), capped at the bucket's size.
_REFILLED = (
    "LEAST(%(burst)s::float8, b.tokens + %(fill)s::float8 * "
    f"GREATEST(0, extract(epoch FROM {NOW} - b.updated_at)::float8))"
)
_UPDATED = f"GREATEST(b.updated_at, {NOW})"

# bucket_acquire: take %(n)s tokens from the key's bucket if it holds them. A new bucket starts full
# (%(burst)s tokens) and gives n at once. A grant stores the tokens left, the time they were counted and
# idle_at, when the bucket is full again (from then on the row says what no row says). RETURNING true
# is the grant; no row returned is the refusal, which changed nothing (see the module docstring).
BUCKET_ACQUIRE = f"""
INSERT INTO jobq_rate_bucket AS b (key, tokens, updated_at, idle_at)
VALUES (%(key)s, %(burst)s::float8 - %(n)s::int, {NOW},
        {NOW} + make_interval(secs => %(n)s::int / %(fill)s::float8))
ON CONFLICT (key) DO UPDATE
SET tokens = {_REFILLED} - %(n)s::int,
    updated_at = {_UPDATED},
    idle_at = {_UPDATED} + make_interval(secs => (%(burst)s::float8 - ({_REFILLED} - %(n)s::int))
                                                 / %(fill)s::float8)
WHERE {_REFILLED} >= %(n)s::int
RETURNING true
"""

# bucket_next: seconds until the key's bucket holds %(n)s tokens, after a refusal (for acquire's wait).
# A plain read of the latest committed state: it decides nothing, it only says when to try again, so it
# needs no lock; a competitor that takes the tokens first just makes the next attempt wait once more.
# No row (pruned meanwhile) means a full bucket: no row, and the caller tries again at once.
BUCKET_NEXT = f"""
SELECT GREATEST(0, (%(n)s::int - {_REFILLED}) / %(fill)s::float8)
FROM jobq_rate_bucket AS b
WHERE b.key = %(key)s
"""

# -- sliding window ----------------------------------------------------------------------------------
# The window's log is a JSON array of the epoch microseconds of its permits (a number per permit). A
# permit granted at t is live while t > now - window. Counting every stamp after now - window, including
# any later than now, counts every permit that shares some window of %(window_us)s microseconds with a
# permit granted now, so no half-open window ever holds more than %(limit)s permits.
_NOW_US = f"(extract(epoch FROM {NOW}) * 1000000)::bigint"
_LIVE = (
    "jsonb_path_query_array(w.stamps, '$[*] ? (@ > $cutoff)', "
    f"jsonb_build_object('cutoff', {_NOW_US} - %(window_us)s::bigint))"
)
_NEW = f"(SELECT jsonb_agg({_NOW_US}) FROM generate_series(1, %(n)s::int))"
_WINDOW = "%(window_us)s::bigint * interval '1 microsecond'"

# window_acquire: add %(n)s permits stamped now to the key's log if the live ones leave room under
# %(limit)s. A grant also drops the stamps that left the window, so the log never holds more than
# %(limit)s entries, and moves idle_at to when its newest stamp leaves the window (then the row may be
# pruned). RETURNING true is the grant; no row returned is the refusal, which changed nothing.
WINDOW_ACQUIRE = f"""
INSERT INTO jobq_rate_window AS w (key, stamps, idle_at)
VALUES (%(key)s, {_NEW}, {NOW} + {_WINDOW})
ON CONFLICT (key) DO UPDATE
SET stamps = {_LIVE} || {_NEW},
    idle_at = GREATEST(w.idle_at, {NOW} + {_WINDOW})
WHERE jsonb_array_length({_LIVE}) + %(n)s::int <= %(limit)s::int
RETURNING true
"""

# window_next: seconds until %(n)s more permits fit, after a refusal (for acquire's wait): the k-th
# oldest live stamp's exit from the window, where k = live + n - limit. A plain read, as bucket_next;
# no row, or room already (k <= 0), gives 0: try again at once.
WINDOW_NEXT = f"""
WITH live AS (
    SELECT s::bigint AS at
    FROM jobq_rate_window AS w, jsonb_array_elements({_LIVE}) AS s
    WHERE w.key = %(key)s
), ranked AS (
    SELECT at, row_number() OVER (ORDER BY at) AS rn,
           count(*) OVER () + %(n)s::int - %(limit)s::int AS k
    FROM live
)
SELECT COALESCE(max(GREATEST(0, at + %(window_us)s::bigint - {_NOW_US})) FILTER (WHERE rn = k), 0)
       / 1e6::float8
FROM ranked
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
