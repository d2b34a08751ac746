"""django-ox: Django's tasks framework (Task.enqueue, django_ox.bulk.enqueue_many) with its own
backend; the ox_worker command runs a thread pool of --concurrency and polls every second."""

from __future__ import annotations

from collections.abc import Callable

from bench.systems.base import DjangoTasksSystem, setup_django


class Ox(DjangoTasksSystem):
    name = "ox"
    label = "django-ox"
    distribution = "django-ox"
    modules = ("django_ox", "django")
    min_python = (3, 12)
    bulk_api = "django_ox.bulk.enqueue_many"
    remaining_sql = "SELECT count(*) FROM django_ox_oxtask WHERE status IN ('READY', 'RUNNING')"
    worker_note = "ox_worker, thread pool; 1 s polling"

    def enqueue_bulk(self, n: int, kind: str = "noop") -> None:
        from django_ox.bulk import enqueue_many

        from bench.djtasks import BY_KIND

        enqueue_many(BY_KIND[kind], [((), {})] * n)

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        from django.core.management import call_command

        setup_django(self.name, self.db_url)
        ready()
        call_command("ox_worker", "--concurrency", str(slots))
