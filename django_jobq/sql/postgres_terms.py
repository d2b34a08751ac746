"""Terms every PostgreSQL statement shares: the clock and the status codes."""

NOW = "COALESCE(%(now)s::timestamptz, now())"

PENDING, RUNNING, DONE, DEAD = 0, 1, 2, 3

# NOW read when it is evaluated rather than at the statement's start (the bound %(now)s of the "python"
# clock all the same): for a statement whose arithmetic must run on a clock at least as late as what
# competitors wrote while it waited for their row lock (the rate limits).
CLOCK = "COALESCE(%(now)s::timestamptz, clock_timestamp())"
