"""A scheduler process for the replica race: says it is ready, waits for its start line, then runs
``manage.py jobq_scheduler --once`` with the given arguments and prints its report.

Usage: python -m tests.procs.scheduler_once [ARGS...]   (DATABASE_URL names the test database)
"""

import sys

import django

django.setup()

from django.core.management import call_command  # noqa: E402

if __name__ == "__main__":
    print("ready", flush=True)  # Django is set up
    sys.stdin.readline()  # start line: every process begins at once
    call_command("jobq_scheduler", "--once", *sys.argv[1:])
