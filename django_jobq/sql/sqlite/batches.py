"""SQLite: the claim of a batch task's further jobs (django_jobq.batches)."""

from ..engine import Unsupported
from .jobs import _claim

# claim_batch: up to %(limit)s more due jobs of one queue for a batch already started, as CLAIM_ONE_QUEUE
# takes them (one UPDATE ... RETURNING under BEGIN IMMEDIATE: no other writer between the selection and
# the write), only the batch's task's and, with a batch key (%(field)s, a payload field's name, as a
# JSON path %(path)s), those whose field holds the batch's value (%(value)s, JSON text; a missing field
# and null read the same).
CLAIM_BATCH = _claim(
    " AND queue = %(queue)s AND task = %(task)s AND (%(field)s IS NULL"
    " OR json_extract(payload, %(path)s) IS json_extract(%(value)s, '$'))"
)
CLAIM_BATCH_CAPPED = Unsupported("queue_caps", 'JOBQ["QUEUES"][...]["MAX_RUNNING"]')
