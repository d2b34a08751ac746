"""PostgreSQL: the rate-limit statements (django_jobq.ratelimit). Each runs alone in autocommit on the
rate limiter's own connection, so a row lock it takes lasts one statement, never a caller's transaction.

An acquire is one statement. It asks for %(n)s permits within %(ahead)s seconds (acquire's wait; 0: now
or never). Granted, it RETURNs the seconds the caller must sleep before using them: 0 when they are
there now, more when they come later and are reserved for it (a token bucket lent into the red, a
stamp in the window's future), so a waiting caller sleeps once and never polls, and waiting callers are
served in the order they asked. Refused, it RETURNs no row, and the refusal is final: room only comes
with time, and a later attempt within the same deadline would have less time to wait for it.

It has two steps:
  seen:  a plain read of the key's row as the statement's snapshot shows it. If that says there is
         not enough, the acquire is refused there and then, with no lock and no write (no commit to
         flush): a refusal is always safe, and an older version of the row never shows less room
         than the newest one (permits only use room up; time frees it for every version alike), so
         this refuses nothing the locked step would grant (but for the microseconds between the two
         clock readings).
  taken: otherwise INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE, which alone grants.

Why N parallel acquires of one key never pass more than its limit: the key is the table's primary key,
so there is one row per key. When the row does not exist yet, one insert wins the unique index; the
others wait for it to commit and then take the DO UPDATE path. DO UPDATE locks the existing row
(waiting for whoever holds it) and evaluates its SET and WHERE on the row's latest committed version,
not on the statement's snapshot. So the grants of one key happen one after another, each sees every
permit granted before it, and each grants only if what is left covers its n; a grant writes the new
state, a refusal (the WHERE is false) writes nothing. Keys never share a row, so they never share a
count or wait for each other.

Time is CLOCK: the database clock read when evaluated, so inside DO UPDATE it is read with the row held
and is never earlier than what a competitor wrote before it (now(), the statement's start, could be);
or the bound %(now)s of the "python" clock. A key's time never goes back all the same (a clock stepped
back, a bound %(now)s moved back): a grant counts at the later of the clock and the row's last time.
"""

from .terms import CLOCK, NOW

_N = "%(n)s::int"

# rest_at: idle_at rounded up to a whole step of REST_STEP_SECONDS on the epoch, the indexed time from
# which the prune may delete the row (its step has ended, so idle_at has passed). An acquire of a busy
# key moves idle_at on every grant but rest_at only when idle_at crosses into the next step: PostgreSQL
# makes an update HOT (no index entry written, the row kept on its page) when no indexed column's value
# changes, so acquires of a key stay HOT updates between steps, one in a step at most is not. A wider
# step means fewer of those and rows at rest kept that much longer (a row at rest says no more than a
# missing row would, so keeping it changes no answer).
REST_STEP_SECONDS = 60


def _rest_at(idle_at: str) -> str:
    return f"to_timestamp(ceil(extract(epoch FROM {idle_at}) / {REST_STEP_SECONDS}) * {REST_STEP_SECONDS})"


# -- token bucket ------------------------------------------------------------------------------------
# The bucket row b at the clock read once: tokens = what it held at updated_at plus %(fill)s tokens per
# second since, capped at %(burst)s (negative while tokens are lent to waiting callers); at = the time
# of that count, never before updated_at.
_BUCKET = f"""(
    SELECT LEAST(%(burst)s::float8, b.tokens + %(fill)s::float8
                 * GREATEST(0, extract(epoch FROM c.t - b.updated_at)::float8)) AS tokens,
           GREATEST(b.updated_at, c.t) AS at
    FROM (SELECT {CLOCK} AS t) AS c
)"""
_LENT = "%(fill)s::float8 * %(ahead)s::float8"  # the tokens that come within the caller's wait

# bucket_acquire: take %(n)s tokens if the bucket holds them now, or will within %(ahead)s seconds (then
# tokens go below zero: lent, and the caller sleeps until they are refilled). A new bucket starts full.
# A grant stores the tokens left, the time of the count and idle_at, when the bucket is full again (from
# then on the row says no more than a missing row would) and its rest_at. RETURNING: seconds until the
# tokens are there.
BUCKET_ACQUIRE = f"""
WITH seen AS (
    SELECT s.tokens FROM jobq_rate_bucket AS b, LATERAL {_BUCKET} AS s WHERE b.key = %(key)s
), taken AS (
    INSERT INTO jobq_rate_bucket AS b (key, tokens, updated_at, idle_at, rest_at)
    SELECT %(key)s, %(burst)s::float8 - {_N}, c.t, i.idle_at, {_rest_at("i.idle_at")}
    FROM (SELECT {CLOCK} AS t) AS c,
         LATERAL (SELECT c.t + make_interval(secs => {_N} / %(fill)s::float8) AS idle_at) AS i
    WHERE NOT EXISTS (SELECT FROM seen WHERE seen.tokens + {_LENT} < {_N})
    ON CONFLICT (key) DO UPDATE
    SET (tokens, updated_at, idle_at, rest_at) = (
        SELECT s.tokens - {_N}, s.at, i.idle_at, {_rest_at("i.idle_at")}
        FROM {_BUCKET} AS s, LATERAL (SELECT s.at + make_interval(
            secs => (%(burst)s::float8 - (s.tokens - {_N})) / %(fill)s::float8) AS idle_at) AS i
    )
    WHERE (SELECT s.tokens FROM {_BUCKET} AS s) + {_LENT} >= {_N}
    RETURNING GREATEST(0, -b.tokens) / %(fill)s::float8
)
SELECT * FROM taken
"""

# bucket_take: take as many of %(n)s tokens as the bucket holds whole now (none lent), for a caller that
# can use fewer (the worker's claim of a rate-limited queue). As for bucket_acquire, a snapshot that shows
# less than one whole token refuses at once, with no lock and no write. Otherwise the key's row is read
# FOR UPDATE, which waits for whoever holds it and returns its latest committed version: the count is
# the one DO UPDATE would see, so the takes of a key are granted one after another, each from what
# the one before left. The UPDATE then writes that row (held by this statement) from the locked count.
# A key with no row is a full bucket: the insert takes up to %(burst)s, and a concurrent first insert
# of the same key makes it take nothing (ON CONFLICT DO NOTHING; the caller asks again). RETURNING
# (taken, tokens left): (0, the tokens there are) when there is not one whole token; no row only after
# that lost insert.
BUCKET_TAKE = f"""
WITH seen AS (
    SELECT s.tokens FROM jobq_rate_bucket AS b, LATERAL {_BUCKET} AS s WHERE b.key = %(key)s
), locked AS MATERIALIZED (
    SELECT b.tokens, b.updated_at FROM jobq_rate_bucket AS b
    WHERE b.key = %(key)s AND (SELECT tokens FROM seen) >= 1 FOR UPDATE
), counted AS MATERIALIZED (
    SELECT s.tokens, s.at, LEAST({_N}, floor(GREATEST(s.tokens, 0)))::int AS granted
    FROM locked AS b, LATERAL {_BUCKET} AS s
), updated AS (
    UPDATE jobq_rate_bucket AS b
    SET (tokens, updated_at, idle_at, rest_at) = (c.tokens - c.granted, c.at, i.idle_at, {_rest_at("i.idle_at")})
    FROM counted AS c, LATERAL (SELECT c.at + make_interval(
        secs => (%(burst)s::float8 - (c.tokens - c.granted)) / %(fill)s::float8) AS idle_at) AS i
    WHERE b.key = %(key)s AND c.granted > 0
    RETURNING c.granted, b.tokens
), inserted AS (
    INSERT INTO jobq_rate_bucket AS b (key, tokens, updated_at, idle_at, rest_at)
    SELECT %(key)s, %(burst)s::float8 - g.n, c.t, i.idle_at, {_rest_at("i.idle_at")}
    FROM (SELECT LEAST({_N}, %(burst)s::int) AS n) AS g, (SELECT {CLOCK} AS t) AS c,
         LATERAL (SELECT c.t + make_interval(secs => g.n / %(fill)s::float8) AS idle_at) AS i
    WHERE NOT EXISTS (SELECT FROM seen)
    ON CONFLICT (key) DO NOTHING
    RETURNING round(%(burst)s::float8 - b.tokens)::int, b.tokens
)
SELECT * FROM updated
UNION ALL SELECT * FROM inserted
UNION ALL SELECT 0, tokens FROM counted WHERE granted = 0
UNION ALL SELECT 0, tokens FROM seen WHERE tokens < 1
"""

# bucket_give_back: put %(n)s tokens taken and never used back into the bucket, at most up to
# %(burst)s (DO UPDATE's reasoning: UPDATE counts on the row's latest committed version, under its
# lock). The tokens are counted at the clock, as a grant counts them: put back then, they leave the
# bucket where it would be had they not been taken (a full bucket stays full; a key without a row is
# full already: nothing to write). RETURNING: the tokens it now holds (no row: the key has none).
BUCKET_GIVE_BACK = f"""
UPDATE jobq_rate_bucket AS b
SET (tokens, updated_at, idle_at, rest_at) = (
    SELECT r.tokens, s.at, i.idle_at, {_rest_at("i.idle_at")}
    FROM {_BUCKET} AS s,
         LATERAL (SELECT LEAST(%(burst)s::float8, s.tokens + {_N}) AS tokens) AS r,
         LATERAL (SELECT s.at + make_interval(
             secs => (%(burst)s::float8 - r.tokens) / %(fill)s::float8) AS idle_at) AS i
)
WHERE b.key = %(key)s
RETURNING b.tokens
"""

# -- sliding window ----------------------------------------------------------------------------------
# The window's log is a JSON array of the epoch microseconds of its permits, in time order (one number
# per permit, granted or reserved). A stamp s is live at time t while s > t - window: a permit shares a
# half-open window of %(window_us)s microseconds with every live stamp and no other.
#
# The window row w at the clock read once: now_us; at = the key's time (the later of now_us and the
# newest stamp, so stamps stay in order); live = the stamps live at `at`; then the time a request for n
# fits: `at` if live + n <= limit, else when the k-th oldest live stamp leaves (k = live + n - limit, the
# log's element k - 1). Placed there, n stamps leave at most limit - n others live with them, and every
# later stamp is placed no earlier, so no window ever holds more than %(limit)s permits.
_WINDOW = f"""(
    SELECT l.live, c.now_us,
           CASE WHEN o.over <= 0 THEN k.at
                ELSE (l.live ->> (o.over - 1))::bigint + %(window_us)s::bigint END AS fits
    FROM (SELECT (extract(epoch FROM {CLOCK}) * 1000000)::bigint AS now_us) AS c,
         LATERAL (SELECT GREATEST(c.now_us, COALESCE((w.stamps ->> -1)::bigint, 0)) AS at) AS k,
         LATERAL (SELECT jsonb_path_query_array(w.stamps, '$[*] ? (@ > $cutoff)',
                                                jsonb_build_object('cutoff', k.at - %(window_us)s::bigint))
                  AS live) AS l,
         LATERAL (SELECT jsonb_array_length(l.live) + {_N} - %(limit)s::int AS over) AS o
)"""
_US = "* interval '1 microsecond'"

# window_acquire: put %(n)s stamps in the key's log at the time they fit, if that is no more than
# %(ahead)s seconds away. A grant drops the stamps no longer live (so the log never holds more than
# %(limit)s entries) and sets idle_at, when its newest stamp leaves the window (then the row may be
# pruned), and its rest_at. A new key's log starts with n stamps of now. RETURNING: seconds until the
# newest stamp's time.
WINDOW_ACQUIRE = f"""
WITH seen AS (
    SELECT s.fits - s.now_us AS ahead_us
    FROM jobq_rate_window AS w, LATERAL {_WINDOW} AS s WHERE w.key = %(key)s
), taken AS (
    INSERT INTO jobq_rate_window AS w (key, stamps, idle_at, rest_at)
    SELECT %(key)s, to_jsonb(array_fill(c.now_us, ARRAY[{_N}])), i.idle_at, {_rest_at("i.idle_at")}
    FROM (SELECT (extract(epoch FROM {CLOCK}) * 1000000)::bigint AS now_us) AS c,
         LATERAL (SELECT 'epoch'::timestamptz + (c.now_us + %(window_us)s::bigint) {_US} AS idle_at) AS i
    WHERE NOT EXISTS (SELECT FROM seen WHERE seen.ahead_us > %(ahead)s::float8 * 1000000)
    ON CONFLICT (key) DO UPDATE
    SET (stamps, idle_at, rest_at) = (
        SELECT s.live || to_jsonb(array_fill(s.fits, ARRAY[{_N}])), i.idle_at, {_rest_at("i.idle_at")}
        FROM {_WINDOW} AS s,
             LATERAL (SELECT 'epoch'::timestamptz + (s.fits + %(window_us)s::bigint) {_US} AS idle_at) AS i
    )
    WHERE (SELECT s.fits - s.now_us FROM {_WINDOW} AS s) <= %(ahead)s::float8 * 1000000
    RETURNING GREATEST(0, (w.stamps ->> -1)::bigint - (extract(epoch FROM {CLOCK}) * 1000000)::bigint)
              / 1e6::float8
)
SELECT * FROM taken
"""

# -- pruning -----------------------------------------------------------------------------------------
# prune_buckets / prune_windows: delete up to %(batch)s rows that say no more than a missing row would
# (a full bucket, a log with no live stamp: idle_at has passed) and whose rest_at step has ended. They
# are found along the rest_at index (oldest first: the order keeps every plan, generic ones too, on
# that index), which holds only rows at rest below now: the statement reads what it deletes, never the
# rows of live keys, however many there are (there is no index on idle_at, on purpose: acquires rewrite
# idle_at, and an index on it would make every one of those updates non-HOT; see rest_at above). The
# rows are picked FOR UPDATE SKIP LOCKED, so pruning never waits for an acquire; a row an acquire
# updated after this statement's snapshot is re-checked on its new version and kept. An acquire waiting
# for a row pruned under it inserts the key afresh, which is what the pruned row said.
PRUNE_BUCKETS = f"""
DELETE FROM jobq_rate_bucket
WHERE key = ANY(ARRAY(
    SELECT key FROM jobq_rate_bucket WHERE rest_at <= {NOW} AND idle_at <= {NOW}
    ORDER BY rest_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)) AND idle_at <= {NOW}
"""

PRUNE_WINDOWS = f"""
DELETE FROM jobq_rate_window
WHERE key = ANY(ARRAY(
    SELECT key FROM jobq_rate_window WHERE rest_at <= {NOW} AND idle_at <= {NOW}
    ORDER BY rest_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)) AND idle_at <= {NOW}
"""
