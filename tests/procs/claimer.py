"""A claiming process for the race tests: drains the queue with claim_batch, prints what it claimed.

Usage: python -m tests.procs.claimer WORKER_ID BATCH   (DATABASE_URL names the test database)
"""

import json
import sys

import django

django.setup()

from django_jobq.models import Job  # noqa: E402


def main(worker_id: str, batch: int) -> None:
    Job.objects.exists()  # connected, statements warm: then say so, and wait for the start line
    print("ready", flush=True)
    sys.stdin.readline()  # start line: every process begins at once
    claimed: list[int] = []
    sizes: list[int] = []
    while jobs := Job.objects.claim_batch(worker_id, batch):
        sizes.append(len(jobs))
        claimed += [job.id for job in jobs]
        done = [(job.id, job.attempts, "null") for job in jobs]
        while done:  # a row another claimer's statement holds for a moment comes back busy: again
            busy = Job.objects.complete_many(worker_id, done).busy
            done = [row for row in done if row[0] in busy]
    print(json.dumps({"claimed": claimed, "max_batch": max(sizes, default=0)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
