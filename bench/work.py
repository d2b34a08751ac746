"""The task bodies every system runs: a no-op, a 50 ms sleep (I/O-bound work) and a start-time probe;
and pure-Python work that holds the interpreter lock (bench.processes)."""

from __future__ import annotations

import asyncio
import os
import time

SLEEP_SECONDS = float(os.environ.get("BENCH_SLEEP_SECONDS", "0.05"))


def noop() -> None:
    return None


def sleep() -> None:
    time.sleep(SLEEP_SECONDS)


async def asleep() -> None:
    await asyncio.sleep(SLEEP_SECONDS)


def spin(loops: int) -> int:
    """CPU-bound work in pure Python (about 20 ms at 200,000 loops on this benchmark's machine)."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


def record_start(key: int) -> None:
    """Append "key start-time" to BENCH_LATENCY_FILE: the moment the job's function began."""
    started = time.time()
    line = f"{int(key)} {started!r}\n".encode()
    fd = os.open(os.environ["BENCH_LATENCY_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one short O_APPEND write: lines from many processes never interleave
    finally:
        os.close(fd)
