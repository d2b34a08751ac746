"""pgqueuer as its package defaults run it: QueueManager.run() with a fetch batch of 10 and no cap on
jobs in flight, in the same processes as the pgqueuer column. Counted among the peers, so the best
peer is never one held back by the mapping to the suite's concurrency; left out of W6, whose ideal
assumes that concurrency."""

from __future__ import annotations

from typing import Any

from bench.systems.pgqueuer_peer import Pgqueuer


class PgqueuerDefaults(Pgqueuer):
    name = "pgqueuer_defaults"
    label = "pgqueuer (defaults)"
    bounded = False
    worker_note = "as pgqueuer, with its defaults: batch 10, no max_concurrent_tasks; LISTEN/NOTIFY"

    def run_options(self, slots: int) -> dict[str, Any]:
        return {}
