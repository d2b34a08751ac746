"""SQLite statements: the job's transitions and maintenance, under the names of sql/postgres.py.

SQLite has one writer at a time: a write statement takes the database's write lock before it reads
(an UPDATE in autocommit is a write transaction from its first step), and a Script runs its steps
under BEGIN IMMEDIATE (sqlite_engine.SqliteEngine). So a statement sees no concurrent write, there is no
SKIP LOCKED to need, and every guard below is evaluated on the rows as they are when it writes.

Transitions out of RUNNING are the same compare-and-set as on PostgreSQL: the job id, status RUNNING,
the owner's worker_id and the fence (the fencing token), success reported through RETURNING. The
fence grows by one with every claim and in-slot retry and nothing lowers it.
"""

from typing import Any

from ..engine import Result, Script, Unsupported
from .terms import CANCELLED, DEAD, DONE, NOW, PENDING, RUNNING, WAITING, each, plus, ts, window_over

__all__ = ["DEAD", "DONE", "NOW", "PENDING", "RUNNING", "ts"]

CLAIMED_COLUMNS = (
    "id", "task", "queue", "payload", "status", "priority", "run_at", "attempts", "max_attempts",
    "fence", "releases", "snoozes", "worker_id", "lease_until", "dedupe_key", "concurrency_key",
    "created_at", "started_at", "tags", "trace_context",
)  # fmt: skip


def _append_error(entry: str) -> str:
    """errors with ``entry`` (a json_object expression) appended, cut to the last %(history)s entries."""
    grown = f"json_insert(errors, '$[#]', {entry})"
    return (
        f"(SELECT json_group_array(json(e.value)) FROM (SELECT value FROM json_each({grown}) "
        f"WHERE key >= json_array_length({grown}) - %(history)s ORDER BY key) AS e)"
    )


def _error(text: str, error_class: str = "NULL") -> str:
    """An error history entry, with the exception's class path when one failed the attempt (as on
    PostgreSQL)."""
    return _append_error(
        f"json_object('attempt', attempts, 'at', {NOW}, 'worker', worker_id, 'error', {text}, "
        f"'class', {error_class})"
    )


def _in_claim_order(results: list[Result]) -> Result:
    """RETURNING gives rows in no defined order; a claim hands them out in claim order."""
    found = results[-1]
    at = {name: i for i, name in enumerate(found.names)}
    rows = sorted(found.rows, key=lambda r: (r[at["priority"]], r[at["run_at"]], r[at["id"]]))
    return Result(found.names, rows, found.rowcount)


# claim: up to %(limit)s due PENDING jobs (lowest priority value, then run_at, then id) become RUNNING
# for this worker, in one UPDATE ... RETURNING under BEGIN IMMEDIATE: no other writer runs between the
# selection and the write, so no two claimers ever take the same job. The subquery reads the claim
# index (status PENDING: queue, priority, run_at, id).
def _claim(where: str = "") -> Script:
    take = f"""UPDATE jobq_job
SET status = {RUNNING}, worker_id = %(worker_id)s, attempts = attempts + 1, fence = fence + 1,
    started_at = {NOW}, lease_until = {plus(NOW, "%(lease)s")}
WHERE id IN (
    SELECT id FROM jobq_job WHERE status = {PENDING} AND run_at <= {NOW}{where}
    ORDER BY priority, run_at, id LIMIT %(limit)s
) AND status = {PENDING}
RETURNING {", ".join(CLAIMED_COLUMNS)}"""
    return Script((take,), _in_claim_order)


_REST_WHERE = f" AND queue NOT IN {each('exclude')}"
CLAIM_ANY_QUEUE = _claim()
CLAIM_ONE_QUEUE = _claim(" AND queue = %(queue)s")
CLAIM_QUEUES = _claim(f" AND queue IN {each('queues')}")
CLAIM_REST = _claim(_REST_WHERE)

_OWNED = f"status = {RUNNING} AND worker_id = %(worker_id)s"
# (id, fence[, result]) from parallel list parameters: each id's fence and result are read at its
# position (json_each's key) with json_extract. These lists are a worker's slots, so they stay small.
_HELD = """(SELECT i.value AS id, json_extract(%(fences)s, '$[' || i.key || ']') AS fence
    FROM json_each(%(ids)s) AS i)"""
_DONE_ROWS = """(SELECT i.value AS id, json_extract(%(fences)s, '$[' || i.key || ']') AS fence,
    json_extract(%(results)s, '$[' || i.key || ']') AS result FROM json_each(%(ids)s) AS i)"""

# A cancel asked of a RUNNING job ends whatever outcome its run writes next as CANCELLED (as on
# PostgreSQL: sql/postgres/jobs.py, _ASKED).
_ASKED = "cancel_requested_at IS NOT NULL"

# complete: RUNNING -> DONE (CANCELLED if a cancel was asked), only by the owner of this very run (a
# NULL fence: any run of this owner); the status written. The second column stands for PostgreSQL's
# completion NOTIFY (wait_for), which SQLite has not.
COMPLETE = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {DONE} END,
    result = CASE WHEN {_ASKED} THEN NULL ELSE %(result)s END,
    key_released = key_released OR {_ASKED}, finished_at = {NOW}, lease_until = NULL
WHERE id = %(id)s AND {_OWNED} AND fence = COALESCE(%(fence)s, fence)
RETURNING status, NULL
"""

# complete_many: COMPLETE for a batch of (id, fence, result): each id with the status written; rows
# whose guard fails are not returned. No row is ever busy: SQLite has no row locks (one writer at a time).
COMPLETE_MANY = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {DONE} END,
    result = CASE WHEN {_ASKED} THEN NULL ELSE d.result END,
    key_released = key_released OR {_ASKED}, finished_at = {NOW}, lease_until = NULL
FROM {_DONE_ROWS} AS d
WHERE jobq_job.id = d.id AND jobq_job.status = {RUNNING} AND jobq_job.worker_id = %(worker_id)s
  AND jobq_job.fence = d.fence
RETURNING id, status, has_dependents
"""

_ENDS_CANCELLED = f"(%(discard)s OR {_ASKED})"
_GIVE_UP = f"(%(permanent)s OR attempts >= max_attempts OR {_ENDS_CANCELLED})"
_RANDOM = "(abs(random()) / 9223372036854775808.0)"  # uniform in [0, 1)
# What killed a job that goes DEAD, as on PostgreSQL: its exception's class path without "builtins.",
# else the class its error text names (jobq_exception_class, sqlite/setup.py).
_DIED_OF = (
    "COALESCE(substr(CASE WHEN substr(%(error_class)s, 1, 9) = 'builtins.' THEN substr(%(error_class)s, 10)"
    " ELSE %(error_class)s END, 1, 200), jobq_exception_class(%(error)s))"
)

# fail: RUNNING -> PENDING (retry at now + backoff), DEAD, or CANCELLED (a Discard or a cancel asked),
# only by the owner of this run. Without an explicit backoff: full jitter below
# min(cap, base * 2^(attempts-1)), as on PostgreSQL.
FAIL = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ENDS_CANCELLED} THEN {CANCELLED} WHEN {_GIVE_UP} THEN {DEAD} ELSE {PENDING} END,
    key_released = key_released OR {_ENDS_CANCELLED},
    run_at = CASE WHEN {_GIVE_UP} THEN run_at ELSE {plus(NOW, f"COALESCE(%(backoff)s, {_RANDOM} * min(%(cap)s, %(base)s * (1 << min(max(attempts - 1, 0), 62))))")} END,
    finished_at = CASE WHEN {_GIVE_UP} THEN {NOW} END,
    worker_id = CASE WHEN {_GIVE_UP} THEN worker_id END,
    lease_until = NULL, last_error = %(error)s, error_count = error_count + 1,
    exception = CASE WHEN {_ENDS_CANCELLED} THEN NULL WHEN {_GIVE_UP} THEN {_DIED_OF} END,
    errors = {_error("%(error)s", "%(error_class)s")}
WHERE id = %(id)s AND {_OWNED} AND fence = COALESCE(%(fence)s, fence)
RETURNING status, NULL
"""

# renew_lease: set one owned job's lease to now + lease.
RENEW_LEASE = f"""
UPDATE jobq_job SET lease_until = {plus(NOW, "%(lease)s")}
WHERE id = %(id)s AND {_OWNED} AND fence = COALESCE(%(fence)s, fence)
RETURNING id
"""

# heartbeat: renew every lease the worker holds (never shortening one), then report the held
# (id, fence) pairs that are no longer this run's ('lost') and those still its own that a cancel was
# asked of ('asked'); both steps in one write transaction. None is 'busy': no row locks here.
HEARTBEAT = Script((
    f"""UPDATE jobq_job SET lease_until = max(lease_until, {plus(NOW, "%(lease)s")})
FROM {_HELD} AS h
WHERE jobq_job.id = h.id AND jobq_job.fence = h.fence AND jobq_job.status = {RUNNING}
  AND jobq_job.worker_id = %(worker_id)s""",
    f"""SELECT h.id, h.fence, 'lost' AS kind FROM {_HELD} AS h WHERE NOT EXISTS (
    SELECT 1 FROM jobq_job AS j WHERE j.id = h.id AND j.status = {RUNNING}
      AND j.worker_id = %(worker_id)s AND j.fence = h.fence)
UNION ALL
SELECT j.id, j.fence, 'asked' FROM jobq_job AS j JOIN {_HELD} AS h ON j.id = h.id AND j.fence = h.fence
WHERE j.status = {RUNNING} AND j.worker_id = %(worker_id)s AND j.{_ASKED}""",
))  # fmt: skip

# snooze_run: as on PostgreSQL: back to PENDING after %(delay)s seconds, no attempt used, one more
# snooze counted; CANCELLED instead when a cancel was asked.
SNOOZE_RUN = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    finished_at = CASE WHEN {_ASKED} THEN {NOW} END,
    worker_id = CASE WHEN {_ASKED} THEN worker_id END,
    key_released = key_released OR {_ASKED},
    attempts = attempts - 1, snoozes = snoozes + 1, lease_until = NULL, started_at = NULL,
    run_at = {plus(NOW, "%(delay)s")}
WHERE id = %(id)s AND {_OWNED} AND fence = %(fence)s
RETURNING status, NULL
"""

# snooze: owned (id, fence, delay) runs back to PENDING without using up an attempt, each due after its
# delay (as on PostgreSQL: a job a worker cannot start, e.g. of a task it does not know); CANCELLED
# instead when a cancel was asked.
SNOOZE = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    finished_at = CASE WHEN {_ASKED} THEN {NOW} END,
    key_released = key_released OR {_ASKED},
    worker_id = CASE WHEN {_ASKED} THEN worker_id END,
    lease_until = NULL, started_at = NULL, attempts = attempts - 1,
    run_at = {plus(NOW, "d.delay")}
FROM (SELECT i.value AS id, json_extract(%(fences)s, '$[' || i.key || ']') AS fence,
             json_extract(%(delays)s, '$[' || i.key || ']') AS delay FROM json_each(%(ids)s) AS i) AS d
WHERE jobq_job.id = d.id AND jobq_job.fence = d.fence AND {_OWNED}
RETURNING id
"""

# release: a stopping worker gives back every job it still holds; the first %(free)s releases of a job
# do not use up an attempt, later ones do, and a job out of attempts goes DEAD (as on PostgreSQL).
_RELEASE_DEAD = "(releases >= %(free)s AND attempts >= max_attempts)"
_RELEASE_ENDS = f"({_RELEASE_DEAD} OR {_ASKED})"
RELEASE = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} WHEN {_RELEASE_DEAD} THEN {DEAD} ELSE {PENDING} END,
    attempts = CASE WHEN releases < %(free)s THEN attempts - 1 ELSE attempts END,
    releases = releases + 1,
    worker_id = CASE WHEN {_RELEASE_ENDS} THEN worker_id END,
    finished_at = CASE WHEN {_RELEASE_ENDS} THEN {NOW} END,
    key_released = key_released OR {_ASKED},
    last_error = CASE WHEN {_ASKED} THEN 'cancelled by ' || coalesce(cancelled_by, '?')
        WHEN {_RELEASE_DEAD} THEN 'released by a stopping worker with no attempts left' ELSE last_error END,
    exception = CASE WHEN {_ASKED} THEN NULL
        WHEN {_RELEASE_DEAD} THEN 'released by a stopping worker with no attempts left' END,
    lease_until = NULL, run_at = {NOW},
    errors = {_error("'released: worker shut down'")}
WHERE {_OWNED}
RETURNING id, NULL
"""

# reap: every RUNNING job whose lease expired goes back to PENDING, or DEAD when out of attempts, in
# one statement; a heartbeat that committed first has moved lease_until and the guard leaves the job.
# The queue and status tell the manager which queues to wake (this process's workers, on commit).
REAP = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} WHEN attempts >= max_attempts THEN {DEAD} ELSE {PENDING} END,
    finished_at = CASE WHEN attempts >= max_attempts OR {_ASKED} THEN {NOW} END,
    worker_id = CASE WHEN attempts >= max_attempts OR {_ASKED} THEN worker_id END,
    key_released = key_released OR {_ASKED},
    run_at = {NOW}, lease_until = NULL, error_count = error_count + 1,
    last_error = 'lease expired: worker ' || coalesce(worker_id, '?') || ' stopped renewing it',
    exception = CASE WHEN {_ASKED} THEN NULL WHEN attempts >= max_attempts THEN 'lease expired' END,
    errors = {_error("'lease expired: worker stopped renewing it'")}
WHERE status = {RUNNING} AND lease_until < {NOW}
RETURNING id, NULL, queue, status
"""

# requeue_free_keys / requeue: as on PostgreSQL (run in one transaction by the manager): release the
# finished holders of the chosen DEAD (or CANCELLED) jobs' keys whose window is over, then -> PENDING with a
# fresh budget; of several chosen jobs sharing a key only one (the holder, else the newest).
REQUEUE_FREE_KEYS = f"""
UPDATE jobq_job SET key_released = 1
WHERE dedupe_key IN (
        SELECT dedupe_key FROM jobq_job
        WHERE id IN {each("ids")} AND status IN ({DEAD}, {CANCELLED}) AND dedupe_key IS NOT NULL
          AND key_released)
  AND NOT key_released AND {window_over("jobq_job")}
"""
REQUEUE = f"""
WITH chosen AS (
    SELECT id FROM (
        SELECT j.id, row_number() OVER (
            PARTITION BY j.dedupe_key, CASE WHEN j.dedupe_key IS NULL THEN j.id END
            ORDER BY j.key_released, j.id DESC) AS n
        FROM jobq_job AS j
        WHERE j.id IN {each("ids")} AND j.status IN ({DEAD}, {CANCELLED})
          AND (j.dedupe_key IS NULL OR NOT j.key_released OR NOT EXISTS (
                SELECT 1 FROM jobq_job AS a WHERE a.dedupe_key = j.dedupe_key AND NOT a.key_released))
    ) WHERE n = 1
)
UPDATE jobq_job
SET status = {PENDING}, attempts = 0, releases = 0,
    run_at = CASE WHEN %(spread)s > 0
                  THEN {plus(f"COALESCE(%(run_at)s, {NOW})", "%(spread)s * (abs(random() %% 1000000) / 1000000.0)")}
                  ELSE COALESCE(%(run_at)s, {NOW}) END,
    priority = COALESCE(%(priority)s, priority), worker_id = NULL, lease_until = NULL,
    started_at = NULL, finished_at = NULL, result = NULL, progress = NULL, key_released = 0,
    cancel_requested_at = NULL, cancelled_by = NULL
WHERE id IN (SELECT id FROM chosen) AND status IN ({DEAD}, {CANCELLED})
RETURNING id, queue, run_at <= {NOW} AS due
"""

# autovacuum: SQLite has none (a database file is vacuumed by hand): NULL, nothing to warn of.
AUTOVACUUM = "SELECT NULL"

_COUNT = "SELECT {s}, count(*) FROM jobq_job WHERE status = {s}{where}"
# counts / counts_queue: jobs per status, exact, one partial-index range each. Read-only.
_STATUSES = (PENDING, RUNNING, DONE, DEAD, CANCELLED, WAITING)
COUNTS = "\nUNION ALL ".join(_COUNT.format(s=s, where="") for s in _STATUSES)
COUNTS_QUEUE = "\nUNION ALL ".join(_COUNT.format(s=s, where=" AND queue = %(queue)s") for s in _STATUSES)

# prune: delete up to %(batch)s finished jobs of one terminal status older than the retention, except a
# job still holding its dedupe key inside its window, a job an unfinished job depends on, and a job of a
# workflow with an unfinished job (as on PostgreSQL); then the edges into the deleted jobs. The count of
# jobs deleted comes back.
_ACTIVE = f"{PENDING}, {RUNNING}, {WAITING}"
PRUNE = Script(
    (
        f"""DELETE FROM jobq_job
WHERE id IN (
    SELECT id FROM jobq_job
    WHERE status = %(status)s AND status IN ({DONE}, {DEAD}, {CANCELLED})
      AND finished_at < {plus(NOW, "-%(age)s")}
      AND (dedupe_key IS NULL OR key_released OR {window_over("jobq_job")})
      AND (NOT has_dependents OR NOT EXISTS (
            SELECT 1 FROM jobq_dependency AS e JOIN jobq_job AS w ON w.id = e.dependent_id
            WHERE e.dependency_id = jobq_job.id AND w.status IN ({_ACTIVE})))
      AND (workflow_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM jobq_job AS w WHERE w.workflow_id = jobq_job.workflow_id AND w.status IN ({_ACTIVE})))
    ORDER BY finished_at LIMIT %(batch)s
) AND status IN ({DONE}, {DEAD}, {CANCELLED})""",
        "SELECT changes()",
        "DELETE FROM jobq_dependency WHERE NOT EXISTS (SELECT 1 FROM jobq_job WHERE id = dependent_id)",
    ),
    lambda results: results[1],
)

SET_PROGRESS = f"""
UPDATE jobq_job SET progress = %(progress)s WHERE id = %(id)s AND {_OWNED} AND fence = %(fence)s
RETURNING id
"""

# retry_in_slot: a failed attempt recorded and the next begun in the same slot (fence + 1, lease
# renewed), only while attempts remain.
RETRY_IN_SLOT = f"""
UPDATE jobq_job
SET attempts = attempts + 1, fence = fence + 1, started_at = {NOW}, lease_until = {plus(NOW, "%(lease)s")},
    last_error = %(error)s, error_count = error_count + 1, errors = {_error("%(error)s", "%(error_class)s")}
WHERE id = %(id)s AND {_OWNED} AND fence = %(fence)s AND attempts < max_attempts AND NOT {_ASKED}
RETURNING attempts, fence
"""

# release_orphans: jobs of this queue this worker holds but does not know it runs (a lost claim
# reply) go back, their attempt returned.
_RELEASE_ORPHANS = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    worker_id = CASE WHEN {_ASKED} THEN worker_id END, finished_at = CASE WHEN {_ASKED} THEN {NOW} END,
    key_released = key_released OR {_ASKED},
    last_error = CASE WHEN {_ASKED} THEN 'cancelled by ' || coalesce(cancelled_by, '?') ELSE last_error END,
    lease_until = NULL, run_at = {NOW}, attempts = attempts - 1
WHERE {_OWNED} AND {{queues}} AND id NOT IN {each("known")}
RETURNING id
"""
RELEASE_ORPHANS = _RELEASE_ORPHANS.format(queues="queue = %(queue)s")
RELEASE_ORPHANS_REST = _RELEASE_ORPHANS.format(queues=f"queue NOT IN {each('exclude')}")

# release_unstarted: runs a worker claimed ahead and never started go back to PENDING, in their place
# (run_at kept), the claim's attempt returned and no release counted; fenced per run. CANCELLED
# instead when a cancel was asked meanwhile.
RELEASE_UNSTARTED = f"""
UPDATE jobq_job
SET status = CASE WHEN {_ASKED} THEN {CANCELLED} ELSE {PENDING} END,
    worker_id = CASE WHEN {_ASKED} THEN worker_id END, finished_at = CASE WHEN {_ASKED} THEN {NOW} END,
    key_released = key_released OR {_ASKED},
    last_error = CASE WHEN {_ASKED} THEN 'cancelled by ' || coalesce(cancelled_by, '?') ELSE last_error END,
    lease_until = NULL, started_at = NULL, attempts = attempts - 1
FROM {_HELD} AS h
WHERE jobq_job.id = h.id AND jobq_job.fence = h.fence AND {_OWNED}
RETURNING id, queue
"""

# due_exists: is a PENDING job due in one queue (or every queue but the excluded)? Reads the claim index.
DUE_EXISTS = f"""SELECT EXISTS (SELECT 1 FROM jobq_job
    WHERE status = {PENDING} AND queue = %(queue)s AND run_at <= {NOW})"""
DUE_EXISTS_REST = f"""SELECT EXISTS (SELECT 1 FROM jobq_job
    WHERE status = {PENDING} AND run_at <= {NOW}{_REST_WHERE})"""

# lock_job: SQLite has no row locks (its write lock is the database's): a plain read.
LOCK_JOB = "SELECT id FROM jobq_job WHERE id = %(id)s"
JOB_STATE = "SELECT status, worker_id, fence FROM jobq_job WHERE id = %(id)s"
JOB_ROW = "SELECT * FROM jobq_job WHERE id = %(id)s"
JOB_TASK = "SELECT task FROM jobq_job WHERE id = %(id)s"


def _completed_then_claimed(results: list[Result]) -> Result:
    """COMPLETE_MANY's rows and the claim's as PostgreSQL's one statement gives them: columns of the
    ids ended DONE, of those ended CANCELLED and of the busy ones (none here), whether one had
    dependents, then the claimed job's columns (one row of NULLs when none)."""
    completed = [row[0] for row in results[0].rows if row[1] == DONE]
    cancelled = [row[0] for row in results[0].rows if row[1] != DONE]
    claimed = _in_claim_order(results[1:])
    settled = any(row[2] for row in results[0].rows)
    ended: tuple[Any, ...] = (completed, cancelled, [], settled)
    rows = [(*ended, *row) for row in claimed.rows] or [(*ended, *[None] * len(claimed.names))]
    return Result(["completed", "cancelled", "busy", "settled", *claimed.names], rows, len(claimed.rows))


# complete_and_claim: the worker's cycle in one write transaction: COMPLETE_MANY, then a claim from one
# queue (or, _REST, from every queue but %(exclude)s).
COMPLETE_AND_CLAIM = Script((COMPLETE_MANY, CLAIM_ONE_QUEUE.steps[0]), _completed_then_claimed)
COMPLETE_AND_CLAIM_REST = Script((COMPLETE_MANY, CLAIM_REST.steps[0]), _completed_then_claimed)

# Not on SQLite (Capabilities): queue and task caps, wait_for's completion notification.
COMPLETE_AND_CLAIM_CAPPED = Unsupported("queue_caps", 'JOBQ["QUEUES"][...]["MAX_RUNNING"]')
COMPLETE_AND_CLAIM_TASK_CAPS = Unsupported("task_caps", "@task(max_running=...)")
COMPLETE_AND_CLAIM_REST_TASK_CAPS = Unsupported("task_caps", "@task(max_running=...)")
COMPLETE_AND_CLAIM_CAPPED_TASK_CAPS = Unsupported("task_caps", "@task(max_running=...)")
CAP_LOCK = Unsupported("queue_caps", 'JOBQ["QUEUES"][...]["MAX_RUNNING"]')
RUNNING_BY_TASK = Unsupported("task_caps", "@task(max_running=...)")
WAIT_MARK = Unsupported("wait_for", "Job.objects.wait_for()")
