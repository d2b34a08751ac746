"""Inbound delivery dedupe (jobq_inbound): one mark per (namespace, key) while its window lasts."""

from .terms import NOW

# first_seen: take the mark of (namespace, key) for %(ttl)s seconds; a row back means this caller is
# the first in the window. A new pair is inserted; an existing mark is renewed only if it has expired
# (DO UPDATE ... WHERE); a live one makes the statement return nothing.
# Exactly one of any number of concurrent callers gets a row: a second insert of the same pair finds
# the first one's index entry and waits until that transaction ends (ON CONFLICT never decides on an
# uncommitted row). If the first rolls back, the waiter inserts after all; if it commits, the waiter
# takes the DO UPDATE branch, which locks the newest committed version of the row, whatever the
# statement's snapshot, and evaluates its WHERE on that version (READ COMMITTED): the mark is live,
# so no update and no row. Callers of an expired mark queue on its row lock the same way: the first
# renews it, the rest re-check the renewed version and find it live. A mark deleted by the prune while
# a caller waits sends that caller back to the insert. The write is part of the caller's transaction,
# so a rollback removes the mark (or the renewal) with the rest of its work.
# NOT EXISTS only short-cuts the common duplicate: a mark live in the snapshot is committed, so its
# window already has its first caller, and the answer is "not first" without proposing a row, which
# would lock the mark (DO UPDATE locks the row even when its WHERE fails) and write WAL for the lock.
# It can only drop a candidate, never add one; marks it cannot see (uncommitted, or expired) go
# through the insert as above.
FIRST_SEEN = f"""
INSERT INTO jobq_inbound AS m (namespace, key, seen_at, expires_at)
SELECT %(namespace)s, %(key)s, {NOW}, {NOW} + make_interval(secs => %(ttl)s)
WHERE NOT EXISTS (
    SELECT FROM jobq_inbound
    WHERE namespace = %(namespace)s AND key = %(key)s AND expires_at > {NOW}
)
ON CONFLICT (namespace, key) DO UPDATE
SET seen_at = EXCLUDED.seen_at, expires_at = EXCLUDED.expires_at
WHERE m.expires_at <= EXCLUDED.seen_at
RETURNING true
"""

# prune_expired_marks: delete up to %(batch)s expired marks, oldest first along the expires_at index.
# SKIP LOCKED leaves a mark that a first_seen is renewing right now (its row is locked) to that caller;
# the rows locked here cannot change before the DELETE in the same statement finds them by ctid, and
# the repeated expiry test keeps a mark renewed in between (a version the lock followed) alive.
PRUNE_MARKS = f"""
DELETE FROM jobq_inbound
WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM jobq_inbound
    WHERE expires_at <= {NOW}
    ORDER BY expires_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)) AND expires_at <= {NOW}
"""
