"""The jobq_worker options that make it a supervisor, checked before anything starts, and the command
line of each worker process it starts (the same options, without the supervisor's own)."""

from __future__ import annotations

import math
import os
import socket
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import validation
from ..exceptions import InvalidJob
from . import memory

if TYPE_CHECKING:
    from .core import Plan

MAX_PROCESSES = 256
DEFAULT_MAX_RESTARTS = 5
DEFAULT_RESTART_WINDOW = 60.0
# jobq_worker's options each worker process gets as they were given, then those that are flags.
FORWARDED = (
    ("queues", "--queues"), ("concurrency", "--concurrency"), ("max_jobs", "--max-jobs"),
    ("grace", "--grace"), ("poll_interval", "--poll-interval"), ("verbosity", "--verbosity"),
    ("settings", "--settings"), ("pythonpath", "--pythonpath"),
)  # fmt: skip
FLAGS = (
    ("burst", "--burst"), ("no_listen", "--no-listen"), ("reap", "--reap"), ("scheduler", "--scheduler"),
    ("traceback", "--traceback"), ("no_color", "--no-color"), ("force_color", "--force-color"),
    ("skip_checks", "--skip-checks"),
)  # fmt: skip


def plan(options: Mapping[str, Any]) -> Plan | None:
    """The supervisor the options ask for (--processes above 1, or --max-memory), or None for one plain
    worker. ValueError, saying which option and why, for options that do not fit."""
    processes, max_memory = options.get("processes", 1), options.get("max_memory")
    max_restarts, window = options.get("max_restarts"), options.get("restart_window")
    if not isinstance(processes, int) or not 1 <= processes <= MAX_PROCESSES:
        raise ValueError(f"--processes must be an integer in [1, {MAX_PROCESSES}], not {processes!r}")
    if max_memory is not None and not (math.isfinite(max_memory) and max_memory > 0):
        raise ValueError(f"--max-memory must be a positive number of MiB, not {max_memory!r}")
    if processes == 1 and max_memory is None:
        for name, value in (("--max-restarts", max_restarts), ("--restart-window", window)):
            if value is not None:
                raise ValueError(
                    f"{name} applies to a supervisor: give --processes N (N > 1) or --max-memory"
                )
        return None
    max_restarts = DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts
    window = DEFAULT_RESTART_WINDOW if window is None else window
    if max_restarts < 0:
        raise ValueError(f"--max-restarts must be >= 0, not {max_restarts}")
    if not (math.isfinite(window) and window > 0):
        raise ValueError(f"--restart-window must be a positive number of seconds, not {window!r}")
    if options.get("max_jobs") is not None and options["max_jobs"] < 1:
        raise ValueError(f"--max-jobs must be >= 1, not {options['max_jobs']}")
    if options.get("grace", 0) < 0:
        raise ValueError(f"--grace must be >= 0, not {options['grace']}")
    metrics_port = options.get("metrics_port")
    if metrics_port is not None and not 1 <= metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be in [1, 65535], not {metrics_port}")
    if options.get("metrics_db"):
        raise ValueError(
            "--metrics-db reads the database, which a supervisor never does: serve the queue's figures "
            "from jobq_reap --metrics-port --metrics-db (or a worker without --processes)"
        )
    if max_memory is not None and not memory.available():
        raise ValueError("--max-memory needs /proc (Linux) or psutil to read a process's memory")
    supervisor_id = options.get("worker_id") or f"{socket.gethostname()}:{os.getpid()}"
    try:
        validation.name(f"{supervisor_id}/{10**9}", "--worker-id (with a process number)")
    except InvalidJob as exc:
        raise ValueError(str(exc)) from None
    from .core import Plan  # the supervising loop, loaded only when there is one to run

    return Plan(
        supervisor_id=supervisor_id,
        processes=processes,
        max_restarts=max_restarts,
        restart_window=float(window),
        max_memory=None if max_memory is None else float(max_memory),
        max_jobs=options.get("max_jobs"),
        burst=bool(options.get("burst")),
        grace=float(options.get("grace", 30.0)),
        metrics_port=metrics_port,
        metrics_addr=str(options.get("metrics_addr") or "0.0.0.0"),
    )


def worker_argv(options: Mapping[str, Any], worker_id: str) -> list[str]:
    """``python -m django jobq_worker ...``: the options as given, but the supervisor's, and the
    worker id ``worker_id``."""
    argv = [sys.executable, "-m", "django", "jobq_worker"]
    argv += [f"{flag}={options[key]}" for key, flag in FORWARDED if options.get(key) is not None]
    argv += [flag for key, flag in FLAGS if options.get(key)]
    return [*argv, f"--worker-id={worker_id}"]
