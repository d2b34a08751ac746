"""An enqueuing process for the dedupe race tests: waits for a start line on stdin, then calls
enqueue (or enqueue_or_get, or run_once) once and prints the answer as JSON.

Usage: python -m tests.procs.enqueuer enqueue|or_get|run_once TASK KEY   (DATABASE_URL names the test database)
"""

import json
import sys

import django

django.setup()

from django_jobq.models import Job  # noqa: E402
from django_jobq.tasks import get_task  # noqa: E402


def main(how: str, task: str, key: str) -> None:
    sys.stdin.readline()  # start line: every process begins at once
    if how == "enqueue":
        answer = Job.objects.enqueue(task, dedupe_key=key)
    elif how == "or_get":
        answer = Job.objects.enqueue_or_get(task, {"key": key}, dedupe_key=key)
    else:
        answer = get_task(task).using(dedupe_key=key).run_once(timeout=60, key=key)
    print(json.dumps(answer))


if __name__ == "__main__":
    main(*sys.argv[1:4])
