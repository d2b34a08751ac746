"""SQLite: no capped queues, so no seats (sql/postgres/seats.py)."""

from ..engine import Unsupported

_CAPS = Unsupported("queue_caps", 'JOBQ["QUEUES"][...]["MAX_RUNNING"]')
SEAT_SEED = _CAPS
SEAT_TAKE = _CAPS
SEAT_RENEW = _CAPS
SEAT_RELEASE = _CAPS
SEAT_RELEASE_ALL = _CAPS
