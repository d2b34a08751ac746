"""oban (the Python port of Oban): Oban.enqueue / enqueue_many from a client-mode instance (its API
is asyncio only, so the sync producer drives it on one event loop kept for the process); its own
``oban start`` command runs the worker: one asyncio producer per queue with the queue's limit as
concurrency, woken by LISTEN/NOTIFY (``oban_insert``), acks batched per fetch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bench.systems.base import System
from bench.systems.probe import importable


class Oban(System):
    name = "oban"
    label = "oban"
    distribution = "oban"
    modules = ("oban", "erlpack")
    min_python = (3, 12)
    bulk_api = "Oban.enqueue_many"
    # The composite (state, queue, priority, scheduled_at, id) index covers the state test.
    remaining_sql = (
        "SELECT count(*) FROM oban_jobs WHERE state IN ('available', 'scheduled', 'executing', 'retryable')"
    )
    worker_note = "oban start, asyncio; queue limit = slots; LISTEN/NOTIFY, 1 s stager"

    runner: asyncio.Runner | None = None
    pool: Any = None
    oban: Any = None

    @classmethod
    def unavailable(cls) -> str | None:
        return super().unavailable() or importable("oban", "bench.systems.oban_jobs")

    def _run(self, coro: Any) -> Any:
        assert self.runner is not None
        return self.runner.run(coro)

    def open(self) -> None:
        from oban import Oban as Client

        self.runner = asyncio.Runner()
        self.pool = self._run(Client.create_pool(self.db_url, min_size=1, max_size=1))
        self.oban = Client(pool=self.pool)  # no queues: client mode, enqueue only

    def close(self) -> None:
        if self.runner is not None:
            if self.pool is not None:
                self._run(self.pool.close())
            self.runner.close()

    def install(self) -> None:
        from oban import Oban as Client
        from oban.schema import install

        async def run() -> None:
            pool = await Client.create_pool(self.db_url, min_size=1, max_size=1)
            try:
                await install(pool)
            finally:
                await pool.close()

        asyncio.run(run())

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        from bench.systems.oban_jobs import BY_KIND

        job = BY_KIND[kind].new({"key": key} if kind == "latency" else {})
        self._run(self.oban.enqueue(job))

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        from bench.systems.oban_jobs import BY_KIND

        worker = BY_KIND[kind]
        self._run(self.oban.enqueue_many([worker.new() for _ in range(n)]))

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        from oban.cli import main

        import bench.systems.oban_jobs  # noqa: F401 (registers the workers)

        ready()
        # Its own command with its defaults, but WARNING: its INFO telemetry writes a log line per job
        # (the other workers here log warnings and errors only).
        main(
            ["start", "--dsn", self.db_url, "--queues", f"default:{slots}", "--log-level", "WARNING"],
            standalone_mode=False,
        )
