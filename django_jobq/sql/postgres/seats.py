"""PostgreSQL: the seats of capped queues (JOBQ["QUEUES"][q]["MAX_RUNNING"], worker/seats.py). A
worker starts a job of a capped queue only in a seat it holds; a queue has one row per seat, numbered
0 .. cap - 1, so the seats held at any moment never outnumber the cap. Each statement runs alone, in
autocommit, on the caller's connection.

Why two workers never hold one seat: a seat changes hands only by SEAT_TAKE, whose UPDATE locks the
row and, under READ COMMITTED, re-checks its WHERE on the row's latest committed version (a concurrent
take that committed first makes the seat held and unexpired again: the row is skipped). A holder's
renewal and release name the fence its take returned, and every take adds one, so a holder whose lease
ran out and whose seat was taken since changes nothing with either: it learns the seat is lost.
Expiry is the database clock's, as for job leases: lease_until < now(). The worker keeps its own
margin (it starts no job in a seat whose last renewal it sent more than a lease less a heartbeat ago),
so a seat is never taken over while its holder may still start a job in it."""

from .terms import NOW

_LEASE = f"{NOW} + make_interval(secs => %(lease)s)"

# The caps a take names: %(queues)s (the seats' names, distinct), %(caps)s and %(wants)s, aligned.
_WANTED = "unnest(%(queues)s::text[], %(caps)s::int[], %(wants)s::int[]) AS w(queue, cap, want)"

# seat_seed: the named caps' seats up to each cap, made once (a missing seat is made here, never by a
# take: an INSERT and an UPDATE in one statement would not see each other's rows).
SEAT_SEED = f"""
INSERT INTO jobq_cap_seat (queue, seat)
SELECT w.queue, n FROM {_WANTED} CROSS JOIN LATERAL generate_series(0, w.cap - 1) AS n
ON CONFLICT (queue, seat) DO NOTHING
"""

# seat_take: of each named cap, up to its want of free seats below its cap (never held, released, or
# their lease run out), lowest first, for %(worker_id)s, each with its new fence; and a row per name
# (name, NULL, its seats below its cap as the statement's snapshot shows them): fewer than the cap says
# that SEAT_SEED is due. One statement for every cap a lane takes seats of. SKIP LOCKED: seats another
# take holds right now are left to it, never waited for.
SEAT_TAKE = f"""
WITH taken AS (
    UPDATE jobq_cap_seat AS s SET holder = %(worker_id)s, fence = s.fence + 1, lease_until = {_LEASE}
    FROM (
        SELECT f.queue, f.seat FROM {_WANTED} CROSS JOIN LATERAL (
            SELECT queue, seat FROM jobq_cap_seat
            WHERE queue = w.queue AND seat < w.cap AND (holder IS NULL OR lease_until < {NOW})
            ORDER BY seat LIMIT w.want FOR UPDATE SKIP LOCKED
        ) AS f
    ) AS free
    WHERE s.queue = free.queue AND s.seat = free.seat
    RETURNING s.queue, s.seat, s.fence
)
SELECT queue, seat, fence FROM taken
UNION ALL
SELECT w.queue, NULL, (SELECT count(*) FROM jobq_cap_seat AS c WHERE c.queue = w.queue AND c.seat < w.cap)
FROM {_WANTED}
"""

# seat_renew: extend the leases of the seats %(worker_id)s still holds, named (queue, seat, fence);
# those returned, with their fence, are still its own, any other is lost (taken over after its lease
# ran out: by another worker, or by another lane of this one, which holds it under a higher fence).
SEAT_RENEW = f"""
UPDATE jobq_cap_seat AS s SET lease_until = {_LEASE}
FROM unnest(%(queues)s::text[], %(seats)s::int[], %(fences)s::bigint[]) AS h(queue, seat, fence)
WHERE s.queue = h.queue AND s.seat = h.seat AND s.fence = h.fence AND s.holder = %(worker_id)s
RETURNING s.queue, s.seat, s.fence
"""


# A release the caller announces (%(notify)s: a busy lane's spare seats, a stopping worker's; not an
# idle lane's, which found none of the cap's jobs) wakes the workers once per seats' name freed: the
# payload is that name (a queue's, or task_seats(NAME)), and a worker whose seat take found none takes
# them at once instead of at its next poll. Whether or not a worker holds the idle lock (terms.wake):
# a capped queue's own lane waiting for a seat claims nothing, so it never goes idle. The wake-up CTE
# is read in full (count), so it runs for every name.
def _waking(released: str) -> str:
    return f"""WITH released AS ({released}),
woken AS (SELECT CASE WHEN %(notify)s THEN pg_notify(%(channel)s, r.queue) END AS sent
          FROM (SELECT DISTINCT queue FROM released) AS r)
SELECT released.queue, released.seat FROM released, (SELECT count(sent) FROM woken) AS w"""


# seat_release: free the seats named as for seat_renew (a lost one is left as it is).
SEAT_RELEASE = _waking("""UPDATE jobq_cap_seat AS s SET holder = NULL, lease_until = NULL
FROM unnest(%(queues)s::text[], %(seats)s::int[], %(fences)s::bigint[]) AS h(queue, seat, fence)
WHERE s.queue = h.queue AND s.seat = h.seat AND s.fence = h.fence AND s.holder = %(worker_id)s
RETURNING s.queue, s.seat""")

# seat_release_all: a stopping worker frees every seat it holds, known to it or not.
SEAT_RELEASE_ALL = _waking("""UPDATE jobq_cap_seat SET holder = NULL, lease_until = NULL
WHERE holder = %(worker_id)s
RETURNING queue, seat""")
