"""The outbox needs shards (JOBQ["SHARDS"]), which are PostgreSQL only."""

from ..engine import Unsupported

_SHARDS = ("shards", 'JOBQ["SHARDS"]')
OUTBOX_WRITE = Unsupported(*_SHARDS)
OUTBOX_TAKE = Unsupported(*_SHARDS)
OUTBOX_DONE = Unsupported(*_SHARDS)
RELAY_JOBS = Unsupported(*_SHARDS)
MOVE_TAKE = Unsupported(*_SHARDS)
MOVE_LEFT = Unsupported(*_SHARDS)
JOBS_PRESENT = Unsupported(*_SHARDS)
MOVE_FORWARD = Unsupported(*_SHARDS)
MOVED_TO = Unsupported(*_SHARDS)
