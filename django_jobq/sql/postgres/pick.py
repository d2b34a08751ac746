"""PostgreSQL: the claim's selection (the "picked" CTE that claim statements share). Kept apart from
django_jobq.sql.postgres.jobs, which composes it with the UPDATE that takes the picked rows."""

from .terms import NOW, PENDING, RUNNING

# claim: pick up to %(limit)s due PENDING jobs and make them RUNNING for this worker, in one statement.
# The selection locks its rows FOR UPDATE SKIP LOCKED, so concurrent claimers never wait for or take the
# same row, and sits in a MATERIALIZED CTE: an optimisation fence the planner cannot inline or re-run,
# so the UPDATE touches exactly the rows selected and never more than the limit. Order: lowest priority
# value first, then run_at, then id, across every queue the claim names. The UPDATE finds the picked
# rows by primary key (id = ANY(ARRAY(...)), an init plan), never by a join whose plan could scan the
# table: the statement is prepared, and a generic plan must not depend on the limit's value.
#
# The selection walks the partial claim index (status PENDING: queue, priority, run_at, id) rather than
# range-scanning it: priority comes before run_at in that index, so "run_at <= now" cannot bound a
# range of it, and a plain scan steps over every future job (delayed, or waiting out a retry backoff)
# filed under a lower priority value; a claim over several queues cannot use the index order at all
# and sorts the whole due backlog. Instead, per queue (_due):
#   lanes: the queue's distinct priority values, lowest first, one index descent each (a recursive skip
#          scan). A recursive CTE is evaluated only as far as its reader pulls, so the walk stops at the
#          lane that fills the limit.
#   due:   per lane, the due jobs are one contiguous index range (queue, priority = p, run_at <= now),
#          read in (run_at, id) order and locked as they are read: a claimer skips the rows another one
#          holds and reads on, and the Limit above stops reading, and locking, at %(limit)s rows.
# The rows come out in claim order without a sort (the walk yields its lanes in ascending order, one
# iteration at a time, and a nested loop keeps the order of its outer side), so nothing stands between
# the lock and the limit that would read ahead. After _WALK lanes, the rest of the queue (priority >=
# the last lane's) is read as one plain index range: thousands of distinct priority values cost at most
# _WALK descents more than the plain scan.
_WALK = 32

# How the planner is shown the limit, the list of queues and "due": the limit and the list as init plans
# (never constants), and due as a closed range of run_at. So a custom plan is costed as the generic plan
# is, and PostgreSQL settles on the generic plan after a few executions instead of planning these
# statements again on every claim; and the generic plan's estimate of the rows due stays small (the
# default selectivity of a range, not of an open inequality), so its cost does not grow with the
# backlog towards the JIT thresholds. Neither changes the plan's shape, which the lateral joins fix.
_LIMIT = "(SELECT %(limit)s::int)"
_DUE_NOW = f"run_at >= '-infinity' AND run_at <= (SELECT {NOW})"


_COLUMNS = "id, priority, run_at"


def _picked(selection: str) -> str:
    """The CTE ``picked`` (the rows a claim takes, by id) of a selection."""
    return f"picked AS MATERIALIZED (\n    {selection}\n)"


def _lanes(queue: str, gate: str = "") -> str:
    """The CTE ``lanes``: the distinct priority values of ``queue``'s PENDING jobs, lowest first, one
    descent of the claim index each, at most _WALK (none unless ``gate`` holds)."""
    gate = f" AND {gate}" if gate else ""
    return f"""lanes(priority, depth) AS (
        (SELECT priority, 1 FROM jobq_job WHERE status = {PENDING} AND queue = {queue}{gate}
         ORDER BY priority LIMIT 1)
        UNION ALL
        SELECT (SELECT n.priority FROM jobq_job AS n
                WHERE n.status = {PENDING} AND n.queue = {queue} AND n.priority > l.priority
                ORDER BY n.priority LIMIT 1),
               l.depth + 1
        FROM lanes AS l WHERE l.priority IS NOT NULL AND l.depth < {_WALK}
    )"""


def _due(queue: str, gate: str = "", limit: str = _LIMIT, rows: str = "", columns: str = _COLUMNS) -> str:
    """The due jobs of one queue (an expression: a parameter, or an outer column), claim order, locked,
    at most ``limit`` (%(limit)s); none unless ``gate`` (a condition on outer columns) holds; only the
    rows for which ``rows`` (a condition on jobq_job's columns) holds, which the walk reads past
    without locking. Columns ``columns`` (id, priority, run_at first)."""
    rows = f" AND {rows}" if rows else ""
    return f"""WITH RECURSIVE {_lanes(queue, gate)}
    SELECT due.* FROM lanes AS l CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT {columns} FROM jobq_job
            WHERE status = {PENDING} AND queue = {queue} AND priority = l.priority AND {_DUE_NOW}
              AND l.depth < {_WALK}{rows}
            ORDER BY run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED) AS lane
        UNION ALL
        SELECT * FROM (
            SELECT {columns} FROM jobq_job
            WHERE status = {PENDING} AND queue = {queue} AND priority >= l.priority AND {_DUE_NOW}
              AND l.depth = {_WALK}{rows}
            ORDER BY priority, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED) AS rest
    ) AS due
    LIMIT {limit}"""


# One queue: its walk, as it comes.
_PICK_ONE = _picked(_due("%(queue)s"))

# One capped queue (JOBQ["QUEUES"][q]["MAX_RUNNING"] = %(cap)s): its walk, taking at most the cap
# less the jobs of the queue RUNNING now (the ones this statement completes, %(ids)s, not counted).
# Only exact after CAP_LOCK in the same transaction: under READ COMMITTED this statement's snapshot
# is taken after the lock was granted, so it sees every claim committed by the previous holder.
_CAPPED_LIMIT = f"""(SELECT GREATEST(0, LEAST(%(limit)s::int, %(cap)s::int - (
        SELECT count(*) FROM jobq_job
        WHERE status = {RUNNING} AND queue = %(queue)s AND id <> ALL(%(ids)s::bigint[]))::int)))"""
_PICK_CAPPED = _picked(_due("%(queue)s", limit=_CAPPED_LIMIT))

# Several queues: each queue's walk (at most %(limit)s rows each), merged by (priority, run_at, id).
# The merge is a sort, which reads all its input before the limit applies, so each queue locks up to
# %(limit)s rows and the claim takes the best %(limit)s of them. That is the one relaxation of the
# order: until the claim commits, the rows it locked but did not take are skipped by a claim running
# at the same moment, which may take a job ranked after them. Sequential claims see the strict order.
_PICK_QUEUES = f"""picked AS MATERIALIZED (
    SELECT due.id FROM (SELECT DISTINCT name FROM unnest((SELECT %(queues)s::text[])) AS u(name)) AS q
    CROSS JOIN LATERAL ({_due("q.name")}) AS due
    ORDER BY due.priority, due.run_at, due.id
    LIMIT {_LIMIT}
)"""


# Every queue: the queues that have PENDING jobs, found by a skip scan of the claim index (one descent
# each), then as for several queues. After _WALK queues the walk stops and the rest (queue >= the last
# one found) is read in plain index order, (queue, priority, run_at, id), without a sort: so when more
# than _WALK queues hold PENDING jobs, the first _WALK - 1 queues (by name) are walked, the rest are
# served in queue-name order, and the merge takes the best of both; with _WALK queues or fewer the
# order is strict. Thousands of queues cost at most _WALK walks (and lock at most _WALK times
# %(limit)s rows), and no plan sorts the backlog.
def _any(rest: str = "", rows: str = "", columns: str = _COLUMNS, limit: str = _LIMIT) -> str:
    """_PICK_ANY's selection; ``rest`` (a condition on a queue name, written with {q}) leaves out the
    queues it does not hold for; ``rows``, ``columns`` and ``limit`` as for _due."""
    keep = f" AND {rest.format(q='q.name')}" if rest else ""
    keep_rows = f" AND {rest.format(q='queue')}" if rest else ""
    more = f" AND {rows}" if rows else ""
    return f"""WITH RECURSIVE queues(name, depth) AS (
        (SELECT queue, 1 FROM jobq_job WHERE status = {PENDING} ORDER BY queue LIMIT 1)
        UNION ALL
        SELECT (SELECT n.queue FROM jobq_job AS n WHERE n.status = {PENDING} AND n.queue > q.name
                ORDER BY n.queue LIMIT 1),
               q.depth + 1
        FROM queues AS q WHERE q.name IS NOT NULL AND q.depth < {_WALK}
    )
    SELECT due.* FROM queues AS q CROSS JOIN LATERAL (
        SELECT * FROM ({_due("q.name", f"q.depth < {_WALK}{keep}", limit, rows, columns)}) AS one
        UNION ALL
        SELECT * FROM (
            SELECT {columns} FROM jobq_job
            WHERE status = {PENDING} AND queue >= q.name AND {_DUE_NOW} AND q.depth = {_WALK}{keep_rows}{more}
            ORDER BY queue, priority, run_at, id LIMIT {limit} FOR UPDATE SKIP LOCKED) AS rest
    ) AS due
    ORDER BY due.priority, due.run_at, due.id
    LIMIT {limit}"""


_PICK_ANY = _picked(_any())
# The rest: every queue but those named in %(exclude)s (the worker's "*" lane, which serves the queues
# its other lanes do not).
_REST = "{q} <> ALL(%(exclude)s::text[])"
_PICK_REST = _picked(_any(_REST))


# Task caps (@task(max_running=N, max_running_per_key=M)), applied by the pick itself: the registered
# capped tasks come as %(cap_tasks)s (names), %(cap_most)s (N, NULL: no task cap) and %(cap_key_most)s
# (M, NULL: no per-key cap); and, as %(cap_ration)s (NULL: none), the rate-limit permits the worker
# took for a rate-limited task before this claim (worker/rationing.py): the claim takes no more of its
# jobs than that, and none at 0, so it never takes a job it may not start.
#   cap_running: their RUNNING jobs per (task, key), the jobs this statement completes (%(ids)s) not
#                counted. RUNNING jobs are few (at most every worker's slots: the lease index's rows).
#   cap_room:    per task, its cap less its RUNNING jobs, or its permits, whichever is less (LEAST
#                leaves out a NULL; NULL: neither, no limit).
#   cap_full:    the (task, key) pairs at their key's cap.
# The walk reads past the jobs of a task, or of a key, with no room left, without locking them
# (_HAS_ROOM), so the claim never takes one and reaches the jobs behind them; the price is that a claim
# reads the due jobs held back ahead of those it takes (a task capped far below a deep backlog costs
# each claim of its queue a read of that backlog; in a queue of its own with MAX_RUNNING it costs
# nothing). Of the rows the walk locks (candidates), the claim keeps what fits: the n-th job of a task
# (of a key) while n is within the task's (the key's) room. What it cuts stays PENDING, untouched, in
# its place (locked until the claim commits: a concurrent claim skips it meanwhile). When the walk stopped at its limit and cut some, held_back says so: jobs the claim could
# take may stand behind, and the caller claims again in the same transaction, where this claim's jobs
# are RUNNING, so the tasks and keys it filled are left out (each claim that cuts fills one, so that
# ends). The room comes from the statement's snapshot: under concurrent claims it may be stale, which
# the caller settles after the claim, under the tasks' CAP_LOCKs (managers/capping.py).
_CAP_ROOM = f"""cap_running AS MATERIALIZED (
    SELECT task, concurrency_key, count(*)::int AS n FROM jobq_job
    WHERE status = {RUNNING} AND task = ANY(%(cap_tasks)s::text[]) AND id <> ALL(%(ids)s::bigint[])
    GROUP BY task, concurrency_key
),
cap_room AS MATERIALIZED (
    SELECT c.task, c.key_most,
           LEAST(c.most - (SELECT COALESCE(sum(r.n), 0) FROM cap_running AS r WHERE r.task = c.task)::int,
                 c.ration) AS room
    FROM unnest(%(cap_tasks)s::text[], %(cap_most)s::int[], %(cap_key_most)s::int[], %(cap_ration)s::int[])
         AS c(task, most, key_most, ration)
),
cap_full AS MATERIALIZED (
    SELECT r.task, r.concurrency_key FROM cap_running AS r JOIN cap_room AS c ON c.task = r.task
    WHERE r.concurrency_key IS NOT NULL AND r.n >= c.key_most
)"""
_HAS_ROOM = (
    "task <> ALL(ARRAY(SELECT task FROM cap_room WHERE room <= 0)) AND (concurrency_key IS NULL OR NOT EXISTS ("
    "SELECT 1 FROM cap_full AS f WHERE f.task = jobq_job.task AND f.concurrency_key = jobq_job.concurrency_key))"
)
_CAP_COLUMNS = f"{_COLUMNS}, task, concurrency_key"


def _within_caps(selection: str) -> str:
    """The task caps' CTEs, ``selection`` (of _CAP_COLUMNS, rows _HAS_ROOM) as candidates, and
    picked: the candidates that fit."""
    order = "ORDER BY d.priority, d.run_at, d.id"
    return f"""{_CAP_ROOM},
candidates AS MATERIALIZED (
    {selection}
),
picked AS MATERIALIZED (
    SELECT c.id FROM (
        SELECT d.*, row_number() OVER (PARTITION BY d.task {order}) AS nth,
               row_number() OVER (PARTITION BY d.task, d.concurrency_key {order}) AS nth_key
        FROM candidates AS d
    ) AS c
    LEFT JOIN cap_room AS r ON r.task = c.task
    LEFT JOIN cap_running AS k ON k.task = c.task AND k.concurrency_key = c.concurrency_key
    WHERE r.task IS NULL OR (
        (r.room IS NULL OR c.nth <= r.room)
        AND (r.key_most IS NULL OR c.concurrency_key IS NULL OR c.nth_key <= r.key_most - COALESCE(k.n, 0)))
)"""


def _held_back(limit: str) -> str:
    """The candidates cut, when the walk stopped at ``limit`` (else 0: nothing stands behind)."""
    return (
        f"(SELECT CASE WHEN count(*) >= {limit} THEN count(*) - (SELECT count(*) FROM picked) ELSE 0 END"
        " FROM candidates)::int"
    )


_PICK_ONE_TASK_CAPS = _within_caps(_due("%(queue)s", rows=_HAS_ROOM, columns=_CAP_COLUMNS))
_PICK_CAPPED_TASK_CAPS = _within_caps(
    _due("%(queue)s", limit=_CAPPED_LIMIT, rows=_HAS_ROOM, columns=_CAP_COLUMNS)
)
_PICK_REST_TASK_CAPS = _within_caps(_any(_REST, rows=_HAS_ROOM, columns=_CAP_COLUMNS))
_HELD_BACK = _held_back(_LIMIT)
_HELD_BACK_CAPPED = _held_back(_CAPPED_LIMIT)
