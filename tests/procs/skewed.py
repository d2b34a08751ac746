"""``python -m tests.procs.skewed COMMAND ARGS``: a management command for a process whose wall clock
libfaketime moves (LD_PRELOAD=libfaketimeMT.so.1 FAKETIME=+3h, with FAKETIME_DONT_FAKE_MONOTONIC=1 so that only the wall clock
is off, as on a badly set host). libfaketime 0.9.10 refuses clock_nanosleep on the real monotonic
clock (EINVAL, which is how time.sleep waits), so time.sleep waits on an Event instead; faking the
monotonic clock as well is no way out: timed condition waits then never return."""

import sys
import threading
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


time.sleep = _sleep

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[1:]])
