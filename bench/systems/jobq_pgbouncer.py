"""django-jobq through PgBouncer in transaction mode: the same worker and enqueue calls as the jobq
column, with every queue connection through a PgBouncer started for the measurement (LISTEN on a
direct connection, prepared statements off). Measured on W2 c4 only: the pooler's cost, held against
the direct column."""

from __future__ import annotations

import os
from typing import ClassVar

from bench import common, pgbouncer
from bench.systems.base import migrate, setup_django
from bench.systems.jobq import Jobq

POOL_SIZE = 8  # server connections PgBouncer opens for the database: fewer than the worker's clients


class JobqPgbouncer(Jobq):
    name = "jobq_pgbouncer"
    label = "django-jobq, PgBouncer"
    worker_note = (
        f"jobq_worker through PgBouncer (transaction mode, pool {POOL_SIZE}); LISTEN on a direct "
        "connection, prepared statements off"
    )
    measures: ClassVar[tuple[str, ...] | None] = ("W2 c4",)

    def __init__(self, db_url: str):
        super().__init__(db_url)
        self.bouncer: pgbouncer.PgBouncer | None = None

    @classmethod
    def unavailable(cls) -> str | None:
        if pgbouncer.binary() is None:
            return "needs pgbouncer (Debian: apt-get install pgbouncer)"
        return super().unavailable()

    def install(self) -> None:
        setup_django(self.name, self.db_url)  # migrations on the direct connection
        migrate()

    def open(self) -> None:
        if self.bouncer is None:
            db = common.parse_url(self.db_url)
            self.bouncer = pgbouncer.PgBouncer(
                db["host"], int(db["port"]), db["user"], pool_size=POOL_SIZE
            ).start()
            os.environ["BENCH_POOLER_URL"] = self.bouncer.url(db["dbname"])
        setup_django(self.name, self.db_url)

    def worker_env(self, slots: int, total: int) -> dict[str, str]:
        return {"BENCH_POOLER_URL": os.environ["BENCH_POOLER_URL"]}

    def close(self) -> None:
        if self.bouncer is not None:
            self.bouncer.stop()
            self.bouncer = None
