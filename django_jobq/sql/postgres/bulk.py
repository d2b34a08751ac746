"""PostgreSQL: enqueue_many's bulk path, for a batch without dedupe keys large enough for COPY to pay
(postgres_engine.PostgresEngine.copy_unkeyed). Not part of the engine interface: an engine without
it inserts the batch with ENQUEUE_MANY."""

from .terms import NOW, wake

# The fewest jobs sent with COPY: below it, ENQUEUE_MANY's single round trip is as fast.
BULK_MIN_ROWS = 100

# Reserve the batch's ids from the table's own sequence (found once, not per row) and read the clock
# the rows are stamped with (the transaction's, or the bound %(now)s). Ids a rolled-back batch
# reserved are skipped, as a rolled-back INSERT's are.
BULK_RESERVE = f"""
SELECT {NOW},
       ARRAY(SELECT nextval((SELECT pg_get_serial_sequence('jobq_job', 'id')::regclass))
             FROM generate_series(1, %(count)s))
"""

# After the COPY, in the same transaction: one notification per distinct queue, as ENQUEUE_MANY sends
# (only while a worker may be waiting: postgres_terms.wake), delivered when the rows commit.
BULK_WAKE = f"""
WITH woken AS (
    SELECT {wake("q")} FROM unnest(%(queues)s::text[]) AS q
)
SELECT count(*) FROM woken
"""

# The rows themselves, in COPY's binary format (each value in its type's own encoding: nothing is
# parsed as text or formatted into SQL), BULK_TYPES giving each column's type. The columns left out
# take their database defaults (fence, releases, error_count, key_released, awaited) or NULL (no dedupe
# key, no worker, no lease), exactly as ENQUEUE_MANY writes them.
BULK_COPY = """
COPY jobq_job (id, task, queue, payload, status, priority, run_at, attempts, max_attempts, concurrency_key,
               tags, trace_context, errors, created_at, fairness_key) FROM STDIN (FORMAT BINARY)
"""
BULK_TYPES = (
    "int8", "text", "text", "jsonb", "int2", "int2", "timestamptz", "int4", "int4", "text", "jsonb",
    "jsonb", "jsonb", "timestamptz", "text",
)  # fmt: skip
