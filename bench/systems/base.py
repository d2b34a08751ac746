"""What the suite needs from each system: install a schema, enqueue, run a worker, count what is left."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any, ClassVar

from bench import common

KINDS = ("noop", "sleep", "latency")  # the three task bodies, see bench.work


class System:
    """One queue under test. The benchmark process creates one instance per measurement; a worker
    process creates one to run ``serve``."""

    name: ClassVar[str]  # command-line name, also part of the database name
    label: ClassVar[str]  # shown in the table
    distribution: ClassVar[str]  # pip name, for the version
    modules: ClassVar[tuple[str, ...]]  # must be importable
    peer: ClassVar[bool] = True  # counted in "best peer"
    uses_django: ClassVar[bool] = False
    needs_django_tasks: ClassVar[bool] = False  # Django's own tasks framework (Django >= 6.0)
    min_python: ClassVar[tuple[int, int]] = (3, 11)
    bulk_api: ClassVar[str | None] = None  # the bulk enqueue call, when the system has one
    remaining_sql: ClassVar[str] = ""  # jobs not finished yet
    worker_note: ClassVar[str] = ""  # how its workers run (polling, wake-ups), for the output
    measures: ClassVar[tuple[str, ...] | None] = None  # only these workload keys; None: all that apply
    bounded: ClassVar[bool] = True  # runs at most the workload's concurrency at once (W6 needs it)
    keep_tables: ClassVar[tuple[str, ...]] = ()  # bookkeeping that reset() must not empty

    def __init__(self, db_url: str):
        self.db_url = db_url

    # -- availability --------------------------------------------------------------------------------
    @classmethod
    def unavailable(cls) -> str | None:
        """Why this system cannot run here, or None."""
        if sys.version_info < cls.min_python:
            need = ".".join(map(str, cls.min_python))
            return f"needs Python >= {need} (this is {sys.version.split()[0]})"
        for module in cls.modules:
            if importlib.util.find_spec(module) is None:
                return f"not installed: `{module}` is not importable (pip install -e '.[bench]')"
        if cls.needs_django_tasks and importlib.util.find_spec("django.tasks") is None:
            import django

            return f"needs Django >= 6.0 for django.tasks (installed: Django {django.get_version()})"
        return None

    @classmethod
    def version(cls) -> str:
        try:
            return importlib.metadata.version(cls.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    @classmethod
    def layout(cls, concurrency: int) -> list[int]:
        """Slots per worker process for a total concurrency: in-process concurrency uses one process
        up to 4 slots and two processes (one per core of the reference machine) beyond."""
        if concurrency <= 4:
            return [concurrency]
        half = concurrency // 2
        return [half, concurrency - half]

    @classmethod
    def describe(cls, concurrency: int) -> str:
        procs = cls.layout(concurrency)
        if len(set(procs)) == 1:
            return f"{len(procs)} process{'es' if len(procs) > 1 else ''} x {procs[0]}"
        return " + ".join(map(str, procs))

    # -- in the benchmark process ----------------------------------------------------------------------
    def open(self) -> None:
        """Get ready to enqueue (configure Django, open connections)."""

    def close(self) -> None:
        pass

    def install(self) -> None:
        """Create the schema in the (empty) database."""
        raise NotImplementedError

    def reset(self) -> None:
        """Empty every table the system writes (keeps migration bookkeeping)."""
        keep = ("django_migrations", "django_content_type", "auth_permission", *self.keep_tables)
        with common.connect(self.db_url) as conn:
            rows = conn.execute(
                "SELECT format('%%I.%%I', schemaname, tablename) FROM pg_tables "
                "WHERE schemaname NOT IN ('pg_catalog', 'information_schema') AND NOT tablename = ANY(%s)",
                [list(keep)],
            ).fetchall()
            if rows:
                conn.execute(f"TRUNCATE {', '.join(r[0] for r in rows)} RESTART IDENTITY CASCADE")

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        """One job, one call, its own transaction."""
        raise NotImplementedError

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        """``n`` jobs in one call of the system's bulk API (only when ``bulk_api`` is set)."""
        raise NotImplementedError

    def enqueue_batch(self, n: int, kind: str = "noop") -> None:
        """``n`` jobs made visible to workers at once (one commit): the bulk API where there is one,
        otherwise one call per job inside one transaction."""
        self.enqueue_bulk(n, kind)

    def remaining(self, conn: Any) -> int:
        return int(conn.execute(self.remaining_sql).fetchone()[0])

    def worker_env(self, slots: int, total: int) -> dict[str, str]:
        """Extra environment for worker processes."""
        return {}

    # -- in a worker process ---------------------------------------------------------------------------
    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        """Run the system's worker with ``slots`` concurrency in this process until SIGTERM; call
        ``ready`` once the worker is configured and about to start its loop."""
        raise NotImplementedError


def setup_django(system: str, db_url: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ["BENCH_SYSTEM"] = system
    os.environ["BENCH_DATABASE_URL"] = db_url
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


class DjangoSystem(System):
    """A system configured through Django settings, its schema created by migrations."""

    uses_django = True

    def open(self) -> None:
        setup_django(self.name, self.db_url)

    def install(self) -> None:
        self.open()
        migrate()


class DjangoTasksSystem(DjangoSystem):
    """A backend of Django's own tasks framework: jobs are the tasks of bench.djtasks."""

    needs_django_tasks = True

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        from bench.djtasks import BY_KIND

        if kind == "latency":
            BY_KIND[kind].enqueue(key=key)
        else:
            BY_KIND[kind].enqueue()
