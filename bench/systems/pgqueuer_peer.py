"""pgqueuer: SyncQueries.enqueue (one job, or lists for a batch) from a sync producer; its asyncio
QueueManager on its recommended asyncpg driver, async entrypoints, batches of fetched jobs and
LISTEN/NOTIFY. Finished jobs leave the queue table.

(Its psycopg async driver waits for notifications while holding the connection, so every query
queues behind a 1 s notifies() timeout when no notification comes; asyncpg listens alongside.)"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

from bench import common, work
from bench.systems.base import System


class Pgqueuer(System):
    name = "pgqueuer"
    label = "pgqueuer"
    distribution = "pgqueuer"
    modules = ("pgqueuer", "asyncpg")
    bulk_api = "Queries.enqueue(lists)"
    remaining_sql = "SELECT count(*) FROM pgqueuer"
    worker_note = "asyncio, async entrypoints; max_concurrent_tasks = slots, batch = slots / 2; LISTEN/NOTIFY"

    conn: Any = None
    queries: Any = None

    def open(self) -> None:
        import psycopg
        from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
        from pgqueuer.queries import SyncQueries

        self.conn = psycopg.connect(common.conninfo(self.db_url), autocommit=True)
        self.queries = SyncQueries(SyncPsycopgDriver(self.conn))

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def install(self) -> None:
        import psycopg
        from pgqueuer.db import PsycopgDriver
        from pgqueuer.queries import Queries

        async def install() -> None:
            conn = await psycopg.AsyncConnection.connect(common.conninfo(self.db_url), autocommit=True)
            async with conn:
                await Queries(PsycopgDriver(conn)).install()

        asyncio.run(install())

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        self.queries.enqueue(kind, str(key).encode() if kind == "latency" else None)

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        self.queries.enqueue([kind] * n, [None] * n, [0] * n)

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        asyncio.run(self._serve(slots, total, ready))

    async def _serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        import asyncpg
        from pgqueuer import PgQueuer

        params = common.parse_url(self.db_url)
        conn = await asyncpg.connect(
            host=params["host"], port=params["port"], user=params["user"],
            password=params["password"], database=params["dbname"],
        )  # fmt: skip
        pgq = PgQueuer.from_asyncpg_connection(conn)

        @pgq.entrypoint("noop")
        async def noop(job: Any) -> None:
            work.noop()

        @pgq.entrypoint("sleep")
        async def sleep(job: Any) -> None:
            await work.asleep()

        @pgq.entrypoint("latency")
        async def latency(job: Any) -> None:
            work.record_start(int(job.payload))

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, pgq.shutdown.set)
        ready()
        await pgq.run(**self.run_options(slots))

    def run_options(self, slots: int) -> dict[str, Any]:
        """QueueManager.run's options. The worker's own cap on jobs in flight is the concurrency;
        pgqueuer requires it to be at least twice the fetch batch. (An entrypoint concurrency_limit
        instead stalls between batches.)"""
        return {"batch_size": max(1, slots // 2), "max_concurrent_tasks": max(2, slots)}
