"""In-process wake-ups, for an engine without LISTEN/NOTIFY: an enqueue (once its transaction
commits) or a pause wakes the workers running in the same process at once; workers elsewhere find the
job on their next poll (JOBQ["POLL_INTERVAL"])."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

Waker = Callable[[str | None], None]
logger = logging.getLogger("django_jobq")

_lock = threading.Lock()
_wakers: list[Waker] = []


def register(waker: Waker) -> None:
    with _lock:
        _wakers.append(waker)


def unregister(waker: Waker) -> None:
    with _lock:
        if waker in _wakers:
            _wakers.remove(waker)


def notify(payloads: Iterable[str]) -> None:
    """Call every registered waker with each payload (a queue's name, or listener.STATE_CHANGED).
    A waker that raises is logged and skipped: the others are still woken, and the commit that
    called this (an enqueue's on_commit) never sees the error."""
    with _lock:
        wakers = list(_wakers)
    for payload in payloads:
        for waker in wakers:
            try:
                waker(payload)
            except Exception:
                logger.exception("jobq: an in-process wake-up failed (%r); the waker polls instead", payload)
