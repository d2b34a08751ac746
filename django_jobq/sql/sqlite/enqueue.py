"""SQLite: the statements that insert jobs, and the dedupe rule (sql/postgres/enqueue.py has it).

At most one row holds each key: the partial unique index jobq_job_dedupe (dedupe_key set, key not
released). A keyed enqueue is two steps under BEGIN IMMEDIATE: release the holder whose window is
over, then INSERT ... ON CONFLICT on that index. The write lock is held from the first step, so no
other enqueue of the key runs between them: one job per window, decided by the index.
"""

from ..engine import Result, Script, Unsupported
from .terms import NOW, PENDING, micros, plus, window_over

# The dedupe index's predicate as Django wrote it, so SQLite matches ON CONFLICT to that partial index.
HELD = "dedupe_key IS NOT NULL AND key_released = 0"

_COLUMNS = """task, queue, payload, status, priority, run_at, attempts, max_attempts, fence, releases,
    error_count, dedupe_key, dedupe_done, dedupe_dead, concurrency_key, tags, trace_context, errors, created_at,
    fairness_key"""

_ONE = f"""%(task)s, %(queue)s, %(payload)s, {PENDING}, %(priority)s,
    {plus(f"COALESCE(%(run_at)s, {NOW})", "%(delay)s")}, 0, %(max_attempts)s, 0, 0, 0, %(dedupe_key)s,
    {micros("%(dedupe_done)s")}, {micros("%(dedupe_dead)s")}, %(concurrency_key)s, %(tags)s,
    %(trace_context)s, '[]', {NOW}, %(fairness_key)s"""

_FREE_ONE = f"""UPDATE jobq_job SET key_released = 1
WHERE dedupe_key = %(dedupe_key)s AND NOT key_released AND {window_over("jobq_job")}"""

# debounce: also a holder of the same task that is RUNNING or finished, whatever its window: the key
# passes to the new job (the successor). A PENDING holder is replaced instead.
_FREE_DEBOUNCE = _FREE_ONE.replace(
    f"AND {window_over('jobq_job')}",
    f"AND ({window_over('jobq_job')} OR (status <> {PENDING} AND task = %(task)s))",
)

_SKIP = "DO NOTHING"
# replace / debounce: a PENDING holder of the same task takes the new payload, priority and run_at; a
# RUNNING or finished holder, or one of another task, is left alone (no row comes back).
_REPLACE = f"""DO UPDATE SET payload = excluded.payload, priority = excluded.priority, run_at = excluded.run_at
    WHERE jobq_job.status = {PENDING} AND jobq_job.task = excluded.task"""


def _insert(conflict: str = "", returning: str = "id, NULL, created_at") -> str:
    target = f"ON CONFLICT (dedupe_key) WHERE {HELD} {conflict}" if conflict else ""
    return f"INSERT INTO jobq_job ({_COLUMNS}) VALUES ({_ONE})\n{target}\nRETURNING {returning}"


# enqueue: one job without a dedupe key (the manager wakes this process's workers on commit).
ENQUEUE = _insert()
# enqueue_keyed / enqueue_replace / enqueue_debounce: one job with a dedupe key; a row back when
# inserted or replaced.
ENQUEUE_KEYED = Script((_FREE_ONE, _insert(_SKIP)))
ENQUEUE_REPLACE = Script((_FREE_ONE, _insert(_REPLACE)))
ENQUEUE_DEBOUNCE = Script((_FREE_DEBOUNCE, _insert(_REPLACE)))


def _inserted_or_holder(results: list[Result]) -> Result:
    return results[1] if results[1].rows else results[2]


# enqueue_or_get: (id, created, created_at): the job this call inserted, or the key's live holder.
ENQUEUE_OR_GET = Script(
    (
        _FREE_ONE,
        _insert(_SKIP, returning="id, 1, created_at"),
        f"""SELECT h.id, 0, h.created_at FROM jobq_job AS h
WHERE h.dedupe_key = %(dedupe_key)s AND NOT h.key_released AND NOT ({window_over("h")})""",
    ),
    _inserted_or_holder,
)

# enqueue_many: many jobs from parallel list parameters; the keyed forms release the batch's keys whose
# window is over first (the manager has dropped repeats of a key inside the batch).
_ARRAYS = ("tasks", "queues", "payloads", "priorities", "run_ats", "max_attempts", "dedupe_keys",
           "dedupe_dones", "dedupe_deads", "concurrency_keys", "tags", "trace_contexts", "fairness_keys")  # fmt: skip
# Each list is materialised once (SQLite indexes a materialised CTE for the join on its key), so a
# batch of n jobs costs n log n, not a nested loop over json_each's unindexed rows.
_LISTS = "WITH " + ",\n".join(
    f"a{n} AS MATERIALIZED (SELECT key, value FROM json_each(%({name})s))" for n, name in enumerate(_ARRAYS)
)
_JOINS = "a0 " + " ".join(f"JOIN a{n} ON a{n}.key = a0.key" for n in range(1, len(_ARRAYS)))
_MANY = f"""SELECT a0.value, a1.value, a2.value, {PENDING}, a3.value, COALESCE(a4.value, {NOW}), 0, a5.value,
    0, 0, 0, a6.value, {micros("a7.value")}, {micros("a8.value")}, a9.value, a10.value, a11.value, '[]', {NOW},
    a12.value
FROM {_JOINS} WHERE true"""


def _many(order: str, conflict: str = "") -> str:
    target = f"ON CONFLICT (dedupe_key) WHERE {HELD} {conflict}" if conflict else ""
    return f"{_LISTS}\nINSERT INTO jobq_job ({_COLUMNS}) {_MANY} ORDER BY {order}\n{target}\nRETURNING id"


_FREE_MANY = f"""UPDATE jobq_job SET key_released = 1
WHERE dedupe_key IN (SELECT value FROM json_each(%(keys)s)) AND NOT key_released
  AND {window_over("jobq_job")}"""
ENQUEUE_MANY = Script((_many("a0.key"),))
ENQUEUE_MANY_KEYED = Script((_FREE_MANY, _many("a6.value, a0.key", _SKIP)))
ENQUEUE_MANY_REPLACE = Script((_FREE_MANY, _many("a6.value, a0.key", _REPLACE)))

# Not on SQLite (Capabilities): MAX_DEPTH backpressure.
_DEPTH = ("max_depth", 'JOBQ["QUEUES"][...]["MAX_DEPTH"]')
ENQUEUE_GATED = Unsupported(*_DEPTH)
ENQUEUE_KEYED_GATED = Unsupported(*_DEPTH)
ENQUEUE_REPLACE_GATED = Unsupported(*_DEPTH)
ENQUEUE_DEBOUNCE_GATED = Unsupported(*_DEPTH)
ENQUEUE_OR_GET_GATED = Unsupported(*_DEPTH)
DEPTH_FULL = Unsupported(*_DEPTH)
DEPTH_SEQ = Unsupported(*_DEPTH)
DEPTH_REFRESH = Unsupported(*_DEPTH)
