"""What a task raises to end its run other than by returning or failing: Snooze (run again later,
no attempt used), Discard (end CANCELLED: nothing to do), and Cancelled (a cancel was asked:
JobContext.check_cancelled raises it)."""

from __future__ import annotations

from . import validation
from .exceptions import InvalidJob, JobqError

MAX_SNOOZE_SECONDS = 366 * 24 * 3600  # a snooze of at most a year


class Snooze(JobqError):
    """``raise Snooze(seconds)``: the job goes back to PENDING, due ``seconds`` from now, without using
    an attempt; at most JOBQ["MAX_SNOOZES"] times per job, then the snooze counts as a failure. A bad
    ``seconds`` (negative, NaN, over a year) raises InvalidJob here, which fails the run."""

    def __init__(self, seconds: float) -> None:
        seconds = validation.seconds(seconds, "Snooze seconds")
        if seconds > MAX_SNOOZE_SECONDS:
            raise InvalidJob(f"Snooze seconds must be at most {MAX_SNOOZE_SECONDS} (a year)")
        self.seconds = seconds
        super().__init__(f"snoozed for {seconds:g}s")


class Discard(JobqError):
    """``raise Discard(reason)``: the job ends CANCELLED with ``reason`` as its last error: no retry,
    no dead letter (for work that no longer makes sense, e.g. its object was deleted)."""

    def __init__(self, reason: str = "discarded") -> None:
        self.reason = validation.error_text(reason)
        super().__init__(self.reason)


class Cancelled(JobqError):
    """Raised by ``context.check_cancelled()`` once a cancel was asked of the running job; the run
    ends CANCELLED (whatever exception ends it, in fact, once the cancel was asked)."""
