"""An acquiring process for the rate-limit tests: CALLS threads each call acquire() once, all released
together after the start line (sent once every process printed "ready"); prints how many
were granted.

Usage: python -m tests.procs.ratelimiter bucket|window KEY LIMIT CALLS   (DATABASE_URL names the test database)
"""

import json
import sys
import threading

import django

django.setup()

from django_jobq import autocommit  # noqa: E402
from django_jobq.ratelimit import SlidingWindow, TokenBucket  # noqa: E402


def main(kind: str, key: str, limit: int, calls: int) -> None:
    if kind == "bucket":
        limiter: TokenBucket | SlidingWindow = TokenBucket(key, rate=1, per=3600, burst=limit)
    else:
        limiter = SlidingWindow(key, limit=limit, window=3600)
    autocommit.POOL_SIZE = 5  # 4 processes: 20 sessions racing, well inside max_connections
    barrier = threading.Barrier(calls + 1)
    granted: list[bool] = []

    def call() -> None:
        barrier.wait()
        granted.append(limiter.acquire())

    threads = [threading.Thread(target=call) for _ in range(calls)]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    sys.stdin.readline()  # start line: every process begins at once
    barrier.wait()
    for thread in threads:
        thread.join()
    autocommit.close_all()
    print(json.dumps({"granted": sum(granted), "calls": len(granted)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
