"""Terms every PostgreSQL statement shares: the clock and the status codes (from status.JobStatus)."""

from ...status import CANCELLED, DEAD, DONE, PENDING, RUNNING, WAITING

__all__ = [
    "CANCELLED",
    "CLOCK",
    "DEAD",
    "DONE",
    "IDLE_LOCK",
    "NOW",
    "PENDING",
    "RUNNING",
    "WAITING",
    "wake",
    "wake_if_due",
]

# The statement's own time (statement_timestamp()), not its transaction's start (now()): a claim, or
# a completion, made late in a longer transaction (a capped claim after its lock, an atomic task's
# DONE after the task ran) records when it happened. So a dependent's started_at is never earlier
# than its dependency's finished_at, and an atomic task's finished_at follows its work. Within one
# statement it is one value, as now() was. The "python" clock binds %(now)s instead.
NOW = "COALESCE(%(now)s::timestamptz, statement_timestamp())"


# NOW read when it is evaluated rather than at the statement's start (the bound %(now)s of the "python"
# clock all the same): for a statement whose arithmetic must run on a clock at least as late as what
# competitors wrote while it waited for their row lock (the rate limits).
CLOCK = "COALESCE(%(now)s::timestamptz, clock_timestamp())"

# The idle lock (django_jobq/idle_lock.py): a worker holds it exclusively, on its own session, while
# one of its lanes found less work than it had room for and may be asleep waiting for a notification.
# Keyed by the notification channel, so installations on other channels never share it.
IDLE_LOCK = "hashtextextended('jobq.idle:' || %(channel)s, 0)"


def wake(queue: str) -> str:
    """The enqueue's notification, sent only when a worker may be waiting. Taking the idle lock
    shared fails while a worker holds it or waits for it: then notify (delivered on commit). When it
    succeeds, nobody waits, no NOTIFY (whose commit PostgreSQL serialises) is needed, and the shared
    lock is held until this transaction ends: a worker going idle waits for that end before it claims
    again, so it sees this job without a notification. No wake-up is lost either way."""
    return (
        "CASE WHEN %(notify)s THEN CASE WHEN NOT pg_try_advisory_xact_lock_shared("
        f"{IDLE_LOCK}) THEN pg_notify(%(channel)s, {queue}) END END"
    )


def wake_if_due(row: str) -> str:
    """wake() for a job a statement locks without taking it (``row``: the table's alias), when it is
    PENDING and due: a claim skips the locked row meanwhile (SKIP LOCKED) and may find nothing else,
    so the statement wakes workers as an enqueue does, and the job is not left to the next poll."""
    return f"CASE WHEN {row}.status = {PENDING} AND {row}.run_at <= {NOW} THEN {wake(f'{row}.queue')} END"
