"""A job's states: the one source of their codes (the model's choices and every engine's SQL terms)."""

from django.db import models


class JobStatus(models.IntegerChoices):
    """A job's life: PENDING -> RUNNING -> DONE, or back to PENDING on retry, or DEAD when exhausted."""

    PENDING = 0  # waiting for run_at and a free worker
    RUNNING = 1  # owned by worker_id until lease_until; renewed by heartbeats
    DONE = 2  # finished; result kept until pruned (JOBQ["DONE_RETENTION_SECONDS"])
    DEAD = 3  # attempts exhausted or permanent error; kept for inspection/requeue until pruned


# The codes as SQL literals, for statements that name a state.
PENDING, RUNNING, DONE, DEAD = (
    int(s) for s in (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DONE, JobStatus.DEAD)
)
