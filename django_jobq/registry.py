"""The task registry: name -> task, shared by jobq's own @task and the django.tasks backend.

It imports no model and no manager, so the layers run one way: registry <- managers <- models <-
tasks/backend. A resolver (the django.tasks backend's) may find a task that is not registered yet.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .exceptions import ConfigurationError, UnknownTask

if TYPE_CHECKING:
    from .tasks import Task

_registry: dict[str, Task[Any, Any]] = {}
# name -> task or None; asked, in order, for a name nobody registered (worker side only).
_resolvers: list[Callable[[str], Task[Any, Any] | None]] = []


def register(new: Task[Any, Any]) -> Task[Any, Any]:
    """Register ``new`` under its name; ConfigurationError if another function holds the name."""
    old = _registry.get(new.name)
    if old is not None and origin(old.func) != origin(new.func):
        raise ConfigurationError(f"task name {new.name!r} is already registered for {origin(old.func)}")
    _registry[new.name] = new
    return new


def origin(func: Callable[..., Any]) -> str:
    """Where a function is defined: the task's identity across re-registrations."""
    target = getattr(func, "jobq_origin", None)  # a django.tasks task's runner names its function
    return target if isinstance(target, str) else f"{func.__module__}.{func.__qualname__}"


def add_resolver(resolver: Callable[[str], Task[Any, Any] | None]) -> None:
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def find_task(name: str) -> Task[Any, Any] | None:
    return _registry.get(name)


def resolve_task(name: str) -> Task[Any, Any] | None:
    """The task registered as ``name``, else one a resolver finds (and registers), else None."""
    found = _registry.get(name)
    if found is not None:
        return found
    for resolver in _resolvers:
        if (found := resolver(name)) is not None:
            return found
    return None


def get_task(name: str) -> Task[Any, Any]:
    """The task registered as ``name``; UnknownTask, naming the closest registered names, if there is none."""
    try:
        return _registry[name]
    except KeyError:
        raise UnknownTask(_unknown_task_message(name)) from None


def close_task_names(name: str, limit: int = 3) -> list[str]:
    """The registered names ``name`` most likely meant: same function name first, then similar spellings."""
    last = name.rpartition(".")[2]
    same_function = sorted(n for n in _registry if n.rpartition(".")[2] == last)
    similar = difflib.get_close_matches(name, list(_registry), n=limit, cutoff=0.6)
    return list(dict.fromkeys(same_function + similar))[:limit]


def _unknown_task_message(name: str) -> str:
    message = f"no task is registered as {name!r}"
    if not _registry:
        return message + (
            "; no task is registered at all: define tasks in an installed app's tasks.py"
            " (imported at start-up), or import the module that defines them"
        )
    close = close_task_names(name)
    if not close:
        return message + f" (registered: {len(_registry)} tasks, none with a similar name)"
    quoted = [repr(n) for n in close]
    options = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
    return f"{message}; did you mean {options}?"


def registered_tasks() -> dict[str, Task[Any, Any]]:
    return dict(_registry)


def capped_tasks() -> dict[str, Task[Any, Any]]:
    """The registered tasks with a max_running or max_running_per_key."""
    return {
        n: t for n, t in _registry.items() if t.max_running is not None or t.max_running_per_key is not None
    }
