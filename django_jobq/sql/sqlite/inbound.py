"""SQLite: inbound dedupe marks (sql/postgres/inbound.py)."""

from .terms import NOW, plus

# first_seen: take the mark of (namespace, key) for %(ttl)s seconds; a row back means first in window.
FIRST_SEEN = f"""
INSERT INTO jobq_inbound (namespace, key, seen_at, expires_at)
SELECT %(namespace)s, %(key)s, {NOW}, {plus(NOW, "%(ttl)s")}
WHERE NOT EXISTS (
    SELECT 1 FROM jobq_inbound
    WHERE namespace = %(namespace)s AND key = %(key)s AND expires_at > {NOW}
)
ON CONFLICT (namespace, key) DO UPDATE
SET seen_at = excluded.seen_at, expires_at = excluded.expires_at
WHERE jobq_inbound.expires_at <= excluded.seen_at
RETURNING 1
"""

PRUNE_MARKS = f"""
DELETE FROM jobq_inbound
WHERE rowid IN (SELECT rowid FROM jobq_inbound WHERE expires_at <= {NOW} ORDER BY expires_at LIMIT %(batch)s)
"""
