"""Which database jobq's statements go to in the current context (django_jobq.shards): a ContextVar
that conf.jobq_settings() reads (None: JOBQ["DATABASE"]), and how it travels to threads and away
from a task's own code. conf.on_database() sets it."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# The database alias jobq's statements go to in this context, when not JOBQ["DATABASE"]: set by
# on_database() around the work of a queue placed on another database (django_jobq.shards).
ALIAS: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobq_database", default=None)


def current_database() -> str | None:
    """The alias on_database() set in this context, or None."""
    return ALIAS.get()


def carrying_database(function: Callable[..., T]) -> Callable[..., T]:
    """``function``, run on the database of the context that wraps it (for a thread's target: a new
    thread starts on the home database)."""
    alias = ALIAS.get()
    if alias is None:
        return function

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> T:
        token = ALIAS.set(alias)
        try:
            return function(*args, **kwargs)
        finally:
            ALIAS.reset(token)

    return run


def home_context() -> contextvars.Context:
    """A copy of the current context on the home database: where a task's own code runs (its
    enqueues, rate limits and inbound marks find their databases themselves; its ORM calls go where
    the routers say, as anywhere in the application)."""
    context = contextvars.copy_context()
    context.run(ALIAS.set, None)
    return context
