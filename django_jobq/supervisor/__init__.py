"""``jobq_worker --processes N``: a supervisor of worker processes, split by responsibility: the restart
policy (policy.py), a child process and its socket (children.py), reading a process's memory
(memory.py), the supervising loop (core.py), its options and the children's command line
(options.py), and the worker's side of the socket (link.py). None of it touches the database."""

from typing import TYPE_CHECKING, Any

from .policy import EXIT_RESTART_LIMIT, RestartPolicy

if TYPE_CHECKING:
    from .core import Plan, Supervisor

__all__ = ["EXIT_RESTART_LIMIT", "Plan", "RestartPolicy", "Supervisor"]


def __getattr__(name: str) -> Any:
    """The supervising loop (core.py), loaded when a supervisor is asked for: a worker process that
    no supervisor runs, or that only talks to its supervisor (link.py), never loads it."""
    if name in ("Plan", "Supervisor"):
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
