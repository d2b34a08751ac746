"""The resident memory of a process: VmRSS from /proc/PID/status, or psutil where there is no /proc
(and psutil is installed); django-jobq does not depend on psutil."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PROC = "/proc"


def _psutil() -> ModuleType | None:
    try:
        return importlib.import_module("psutil")
    except ImportError:
        return None


def available() -> bool:
    """Whether resident memory can be read on this system."""
    return os.path.exists(f"{PROC}/self/status") or _psutil() is not None


def rss_mib(pid: int) -> float | None:
    """The resident set of process ``pid`` in MiB; None when the process is gone (or a zombie)."""
    try:
        with open(f"{PROC}/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024  # kB
        return None  # a zombie has no VmRSS line
    except FileNotFoundError:
        if os.path.exists(f"{PROC}/self/status"):
            return None  # /proc works: the process is gone
    except ProcessLookupError:
        return None
    psutil = _psutil()
    if psutil is None:
        return None
    try:
        return float(psutil.Process(pid).memory_info().rss) / (1 << 20)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
