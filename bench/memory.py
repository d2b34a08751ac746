"""Resident memory of a system's worker processes: VmRSS from /proc/PID/status, summed over every
process in each worker's process group (a worker and any pool of processes it starts)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")


def _pgid(pid: str) -> int | None:
    try:
        stat = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ")".
    fields = stat.rpartition(")")[2].split()
    return int(fields[2]) if len(fields) > 2 else None


def _rss_kb(pid: str) -> int:
    try:
        for line in (PROC / pid / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0  # gone meanwhile, or a kernel thread (no VmRSS line)


def group_rss(leaders: Iterable[int]) -> dict[str, int]:
    """``{"kb": total VmRSS, "processes": n}`` over the process groups led by ``leaders`` (each worker
    runs in its own session, so its group id is its pid)."""
    groups = set(leaders)
    total = count = 0
    for entry in PROC.iterdir():
        if entry.name.isdigit() and _pgid(entry.name) in groups:
            kb = _rss_kb(entry.name)
            if kb:
                total, count = total + kb, count + 1
    return {"kb": total, "processes": count}
