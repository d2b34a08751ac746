"""chancy: Chancy.sync_push / sync_push_many from its sync pool; its asyncio Worker runs the queue
"default" declared with concurrency = slots, its thread-pool executor (sync task bodies, as
procrastinate runs them) and eager polling; woken by LISTEN/NOTIFY (``queue.pushed``). Job outcomes
are written in batches once a second, as its worker does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from bench.systems.base import System

FUNCS = {"noop": "bench.work.noop", "sleep": "bench.work.sleep", "latency": "bench.work.record_start"}


def make_app(db_url: str) -> Any:
    from chancy import Chancy

    # Its default logger writes an INFO line for every job pulled; the other workers here log
    # warnings and errors only.
    log = logging.getLogger("chancy")
    log.setLevel(logging.WARNING)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())
    return Chancy(db_url, log=log)


class ChancyPeer(System):
    name = "chancy"
    label = "chancy"
    distribution = "chancy"
    modules = ("chancy",)
    bulk_api = "Chancy.sync_push_many"
    keep_tables = ("chancy_schema_version",)  # its migration versions: a worker refuses to start without
    remaining_sql = "SELECT count(*) FROM chancy_jobs WHERE state IN ('pending', 'running', 'retrying')"
    worker_note = (
        "asyncio Worker, thread-pool executor, concurrency = slots, eager polling; LISTEN/NOTIFY, "
        "5 s poll; outcomes written once a second"
    )

    app: Any = None

    def open(self) -> None:
        self.app = make_app(self.db_url)
        self.app.sync_pool.open()

    def close(self) -> None:
        if self.app is not None:
            self.app.sync_pool.close()

    def install(self) -> None:
        async def run() -> None:
            async with make_app(self.db_url) as app:
                await app.migrate()

        asyncio.run(run())

    def _job(self, kind: str, key: int = 0) -> Any:
        from chancy import Job

        return Job(func=FUNCS[kind], kwargs={"key": key} if kind == "latency" else {})

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        self.app.sync_push(self._job(kind, key))

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        # One transaction for the lot (its default commits every 1,000 jobs).
        for _ in self.app.sync_push_many([self._job(kind) for _ in range(n)], batch_size=max(1, n)):
            pass

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        asyncio.run(self._serve(slots, ready))

    async def _serve(self, slots: int, ready: Callable[[], None]) -> None:
        from chancy import Chancy, Queue, Worker

        async with make_app(self.db_url) as app:
            # The queue lives in the database; every process of a layout declares the same one.
            queue = Queue("default", concurrency=slots, executor=Chancy.Executor.Threaded, eager_polling=True)
            await app.declare(queue, upsert=True)
            async with Worker(app) as worker:
                ready()
                await worker.wait_for_shutdown()
