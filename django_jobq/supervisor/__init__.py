"""``jobq_worker --processes N``: a supervisor of worker processes, split by responsibility: the restart
policy (policy.py), a child process and its socket (children.py), reading a process's memory
(memory.py), the supervising loop (core.py), its options and the children's command line
(options.py), and the worker's side of the socket (link.py). None of it touches the database."""

from .core import EXIT_RESTART_LIMIT, Plan, Supervisor
from .policy import RestartPolicy

__all__ = ["EXIT_RESTART_LIMIT", "Plan", "RestartPolicy", "Supervisor"]
