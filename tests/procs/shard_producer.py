"""A producer for the shard chaos test: transactions on the home database, each enqueueing a few jobs
for queues on the shards (through the outbox) and then committing or rolling back at random. After
each transaction it appends one line to OUT: "C id id ..." (committed) or "R id id ..." (rolled back,
by choice or because a shard was down: those ids were reserved and are never written).

Usage: python -m tests.procs.shard_producer OUT JOBS SEED QUEUE[,QUEUE...]   (settings from the env)
"""

import random
import sys
import time

import django

django.setup()

from django.db import DatabaseError, connections, transaction  # noqa: E402

from django_jobq.models import Job  # noqa: E402


class RolledBack(Exception):
    pass


def main(out: str, jobs: int, seed: int, queues: list[str]) -> None:
    rng = random.Random(seed)
    written = 0
    with open(out, "a") as log:
        while written < jobs:
            ids: list[int] = []
            commit = rng.random() < 0.75
            try:
                with transaction.atomic():
                    for _ in range(min(rng.randint(1, 8), jobs - written)):
                        payload = {"ms": rng.randint(1, 20)}
                        ids.append(Job.objects.enqueue("test.ledger", payload, queue=rng.choice(queues)))
                    if not commit:
                        raise RolledBack
            except RolledBack:
                pass
            except DatabaseError:  # a shard is down (its id could not be reserved): rolled back
                connections.close_all()
                commit = False
                time.sleep(0.1)
            log.write(("C " if commit else "R ") + " ".join(map(str, ids)) + "\n")
            log.flush()
            written += len(ids) if commit else 0  # JOBS committed jobs in all


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","))
