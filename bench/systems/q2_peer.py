"""django-q2 with its ORM broker: async_task per job; one qcluster with N worker processes that
poll the broker table every 0.2 s."""

from __future__ import annotations

from collections.abc import Callable

from bench.systems.base import DjangoSystem, setup_django

FUNCS = {"noop": "bench.work.noop", "sleep": "bench.work.sleep", "latency": "bench.work.record_start"}


class Q2(DjangoSystem):
    name = "q2"
    label = "django-q2 (ORM)"
    distribution = "django-q2"
    modules = ("django_q", "django")
    remaining_sql = "SELECT count(*) FROM django_q_ormq"
    worker_note = "qcluster, worker processes; ORM broker, 0.2 s polling"

    @classmethod
    def layout(cls, concurrency: int) -> list[int]:
        return [concurrency]  # one cluster; its worker processes are the concurrency

    @classmethod
    def describe(cls, concurrency: int) -> str:
        return f"1 cluster x {concurrency} worker processes"

    def enqueue(self, kind: str = "noop", key: int = 0) -> None:
        from django_q.tasks import async_task

        if kind == "latency":
            async_task(FUNCS[kind], key)
        else:
            async_task(FUNCS[kind])

    def enqueue_batch(self, n: int, kind: str = "noop") -> None:
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():
            for _ in range(n):
                async_task(FUNCS[kind])

    def worker_env(self, slots: int, total: int) -> dict[str, str]:
        return {"BENCH_CONCURRENCY": str(slots)}

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        from django.core.management import call_command

        setup_django(self.name, self.db_url)
        ready()
        call_command("qcluster")
