"""A job's states: the one source of their codes (the model's choices and every engine's SQL terms),
and what a cancel did."""

import enum
from dataclasses import dataclass

from django.db import models


class JobStatus(models.IntegerChoices):
    """A job's life: PENDING -> RUNNING -> DONE, or back to PENDING on retry, or DEAD when exhausted;
    CANCELLED from PENDING, RUNNING or WAITING when cancelled or discarded. A job enqueued with
    dependencies starts WAITING and becomes PENDING when the last of them finishes."""

    PENDING = 0  # waiting for run_at and a free worker
    RUNNING = 1  # owned by worker_id until lease_until; renewed by heartbeats
    DONE = 2  # finished; result kept until pruned (JOBQ["DONE_RETENTION_SECONDS"])
    DEAD = 3  # attempts exhausted or permanent error; kept for inspection/requeue until pruned
    CANCELLED = 4  # cancelled or discarded: never retried; kept until pruned (CANCELLED_RETENTION_SECONDS)
    WAITING = 5  # held until its dependencies finish (never claimed); then PENDING (django_jobq.workflows)


# The codes as SQL literals, for statements that name a state.
PENDING, RUNNING, DONE, DEAD, CANCELLED, WAITING = (int(s) for s in JobStatus)
FINISHED = (DONE, DEAD, CANCELLED)  # the terminal states
ACTIVE = (PENDING, RUNNING, WAITING)  # not finished yet


class CancelOutcome(enum.Enum):
    """What Job.objects.cancel() did."""

    CANCELLED = "cancelled"  # it was PENDING: it is CANCELLED now and never runs
    CANCEL_REQUESTED = "cancel requested"  # it is RUNNING: its run is asked to stop and ends CANCELLED
    ALREADY_FINISHED = "already finished"  # DONE, DEAD or CANCELLED: left as it was
    NOT_FOUND = "not found"  # there is no such job


@dataclass(frozen=True, slots=True)
class CancelCounts:
    """What Job.objects.cancel_many() did: jobs CANCELLED at once, and RUNNING jobs asked to stop."""

    cancelled: int = 0
    requested: int = 0
