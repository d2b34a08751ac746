"""Threads released together on a barrier, for the contract suite's races."""

import threading
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections


def race(n: int, target: Callable[[int], Any]) -> list[Any]:
    """Run target(i) in n threads released together; their results, by i."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
