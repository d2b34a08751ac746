"""PostgreSQL: the claim of a batch task's further jobs (django_jobq.batches)."""

from .jobs import _TAKE
from .pick import _CAPPED_LIMIT, _due, _picked

# The jobs a batch may take: its task's, and with a batch key (%(field)s: a payload field's name), those
# whose field holds the batch's value (%(value)s, JSON text; a missing field reads as null). The walk
# reads past other jobs of the queue without locking them: a batch task in a queue of its own reads
# nothing else.
_MEMBERS = (
    "task = %(task)s AND (%(field)s::text IS NULL"
    " OR COALESCE(payload -> %(field)s::text, 'null'::jsonb) = %(value)s::jsonb)"
)

# claim_batch: up to %(limit)s more due jobs of one queue for a batch already started, as the worker's
# claim takes them (postgres_pick: the queue's walk, locked FOR UPDATE SKIP LOCKED behind a MATERIALIZED
# CTE, in claim order; each taken with a new fence, attempts + 1 and a lease), only the batch's own.
CLAIM_BATCH = f"WITH {_picked(_due('%(queue)s', rows=_MEMBERS))}\n{_TAKE}"
# The same for a queue with MAX_RUNNING (%(cap)s), run after the queue's CAP_LOCK in the same
# transaction: it takes no more than the cap less the queue's RUNNING jobs (_CAPPED_LIMIT, with
# %(ids)s empty: this statement completes nothing), so a batch counts each of its jobs against the cap.
CLAIM_BATCH_CAPPED = f"WITH {_picked(_due('%(queue)s', limit=_CAPPED_LIMIT, rows=_MEMBERS))}\n{_TAKE}"
