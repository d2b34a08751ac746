"""Signals sent by the worker; every one carries ``worker_id``, and all but ``jobs_claimed`` ``job`` (the
Job as claimed).

They are sent robustly: a receiver that raises is logged and never affects the job or the worker."""

import logging
import threading
from collections.abc import Callable
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
job_task_unknown = (
    Signal()
)  # the worker knows no task of the job's name: the job waits for one that does; also ``delay``
jobs_claimed = Signal()  # a lane's claim statement ran; ``lane``, ``asked`` and ``claimed`` (no ``job``)


# django-jobq's own receivers (the metrics), called directly before a signal's Django receivers: a
# few are sent for every job, and Django's dispatch would cost each more than what it does.
_hooks: dict[Signal, tuple[Callable[..., Any], ...]] = {}
_hooking = threading.Lock()


def hook(signal: Signal, receiver: Callable[..., Any]) -> None:
    """Call ``receiver(**kwargs)`` on every send of ``signal`` (once, however often hooked)."""
    with _hooking:
        current = _hooks.get(signal, ())
        if receiver not in current:
            _hooks[signal] = (*current, receiver)


def send(signal: Signal, **kwargs: Any) -> None:
    """Send ``signal`` to every receiver; log (never raise) what a receiver raises."""
    from .tasks import Task

    for hooked in _hooks.get(signal, ()):
        try:
            hooked(**kwargs)
        except Exception:
            logger.exception("signal receiver %r raised", hooked)
    if not signal.receivers:
        return
    for receiver, response in signal.send_robust(sender=Task, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "signal receiver %r raised",
                receiver,
                exc_info=(type(response), response, response.__traceback__),
            )
