"""Terms every PostgreSQL statement shares: the clock and the status codes."""

NOW = "COALESCE(%(now)s::timestamptz, now())"

PENDING, RUNNING, DONE, DEAD = 0, 1, 2, 3
