"""Task middleware (JOBQ["MIDDLEWARE"]): callables ``mw(job, context, call_next)`` wrapped around every
run, the first listed outermost; the documented place for tracing, error reporting, tenancy, timing.

A plain function wraps the call in the slot's thread; for an ``async def`` task, ``call_next()``
returns the awaitable, which a plain middleware returns as it is (it sees the run set up, not the run)
and an ``async def`` middleware awaits (it sees the whole run). What a middleware raises fails that
run like the task's own exception: retried, then DEAD."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from django.utils.module_loading import import_string

from ..conf import jobq_settings

Middleware = Callable[[Any, Any, Callable[[], Any]], Any]


def layers() -> tuple[Middleware, ...]:
    """The configured middleware, outermost first (imported once per setting)."""
    return imported(jobq_settings().middleware)


@functools.lru_cache(maxsize=8)
def imported(paths: tuple[str, ...]) -> tuple[Any, ...]:
    """The objects of dotted ``paths`` (a setting's), imported once per value of the setting."""
    return tuple(import_string(path) for path in paths)


def run_sync(chain: tuple[Middleware, ...], job: Any, context: Any, call: Callable[[], Any]) -> Any:
    """``call()`` inside every middleware of ``chain``."""
    for middleware in reversed(chain):
        call = functools.partial(middleware, job, context, call)
    return call()


async def run_async(
    chain: tuple[Middleware, ...], job: Any, context: Any, call: Callable[[], Awaitable[Any]]
) -> Any:
    """``await call()`` inside every middleware of ``chain``."""
    handler: Callable[[], Awaitable[Any]] = call
    for middleware in reversed(chain):
        handler = functools.partial(_layer, middleware, job, context, handler)
    return await handler()


async def _layer(middleware: Middleware, job: Any, context: Any, inner: Callable[[], Awaitable[Any]]) -> Any:
    result = middleware(job, context, inner)
    return await result if inspect.isawaitable(result) else result
