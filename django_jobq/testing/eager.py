"""Eager mode for tests: every enqueue runs the due jobs at once, in the caller's thread and
transaction, as Django's ImmediateBackend runs a task inside ``enqueue()``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

from .runner import run_jobs

_state = threading.local()  # depth: enqueue calls in progress on this thread; running: a run is


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _eagerly(
    enqueue: Callable[..., Any], retries: bool, after: Callable[[Any, Any], Any] | None = None
) -> Any:
    """``enqueue`` that, as the outermost enqueue call of this thread and outside a run, runs every due
    job before returning (jobs the runs enqueue too); ``after(self, returned)`` makes its answer."""

    @functools.wraps(enqueue)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        _state.depth = _depth() + 1
        try:
            returned = enqueue(self, *args, **kwargs)
        finally:
            _state.depth -= 1
        if _state.depth == 0 and not getattr(_state, "running", False):
            _state.running = True
            try:
                run_jobs(retries=retries)
            finally:
                _state.running = False
        return returned if after is None else after(self, returned)

    return wrapper


def _refreshed(backend: Any, result: Any) -> Any:
    """A Django Tasks result read again after its run (SUCCESSFUL or FAILED, as ImmediateBackend's)."""
    return backend.get_result(result.id)


@contextmanager
def eager(*, retries: bool = False) -> Iterator[None]:
    """Within the block, ``enqueue`` (django-jobq's and Django's Tasks API on JobqBackend) returns
    after the due jobs ran, each through the worker's claim → run → fenced write; a Django Tasks
    result comes back SUCCESSFUL or FAILED. ``retries=False`` (ImmediateBackend's way): a failed run
    goes DEAD at once; True: it is retried after its backoff, as a worker would. Jobs scheduled for
    later wait. Usable as a decorator. For synchronous code: an enqueue from another thread (an async
    view's ``sync_to_async``) runs nothing."""
    from ..backend import JobqBackend
    from ..models import Job

    manager = type(Job.objects)
    with ExitStack() as stack:
        for name in ("enqueue", "enqueue_or_get", "enqueue_many"):
            patched = _eagerly(getattr(manager, name), retries)
            stack.enter_context(mock.patch.object(manager, name, patched))
        patched = _eagerly(JobqBackend.enqueue, retries, after=_refreshed)
        stack.enter_context(mock.patch.object(JobqBackend, "enqueue", patched))
        yield
