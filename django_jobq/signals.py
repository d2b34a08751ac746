"""Signals sent by the worker; every one carries ``worker_id``, and all but ``jobs_claimed`` ``job`` (the
Job as claimed).

They are sent robustly: a receiver that raises is logged and never affects the job or the worker."""

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("django_jobq")

job_started = Signal()  # before the task function runs
job_succeeded = Signal()  # after DONE was written; also ``result`` and ``duration``
job_retried = Signal()  # after the job went back to PENDING; also ``error`` and ``delay``
job_dead = Signal()  # after the job went DEAD; also ``error``
job_cancelled = Signal()  # after a run ended CANCELLED (cancel, Discard, discard_on); also ``reason``
job_snoozed = Signal()  # after a run raised Snooze and the job waits again; also ``delay``
job_lease_lost = Signal()  # a heartbeat found the job no longer this worker's (reaped, cut off)
job_rate_limited = Signal()  # a run found no rate-limit permit: the job waits for one; also ``delay``
jobs_claimed = Signal()  # a lane's claim statement ran; ``lane``, ``asked`` and ``claimed`` (no ``job``)


def send(signal: Signal, **kwargs: Any) -> None:
    """Send ``signal`` to every receiver; log (never raise) what a receiver raises."""
    from .tasks import Task

    for receiver, response in signal.send_robust(sender=Task, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "signal receiver %r raised",
                receiver,
                exc_info=(type(response), response, response.__traceback__),
            )
