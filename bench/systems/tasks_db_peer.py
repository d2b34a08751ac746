"""django-tasks-db: Django's tasks framework (Task.enqueue) stored by its database backend; the
db_worker command runs one task at a time per process and polls every second."""

from __future__ import annotations

from collections.abc import Callable

from bench.systems.base import DjangoTasksSystem, setup_django


class TasksDb(DjangoTasksSystem):
    name = "tasks_db"
    label = "django-tasks-db"
    distribution = "django-tasks-db"
    modules = ("django_tasks_db", "django")
    min_python = (3, 12)
    remaining_sql = (
        "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status IN ('READY', 'RUNNING')"
    )
    worker_note = "db_worker, 1 task at a time per process; 1 s polling"

    @classmethod
    def layout(cls, concurrency: int) -> list[int]:
        return [1] * concurrency  # one task at a time per process: concurrency is processes

    def enqueue_batch(self, n: int, kind: str = "noop") -> None:
        from django.db import transaction

        from bench.djtasks import BY_KIND

        task = BY_KIND[kind]
        with transaction.atomic():
            for _ in range(n):
                task.enqueue()

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        from django.core.management import call_command

        setup_django(self.name, self.db_url)
        ready()
        call_command("db_worker", "--no-startup-delay", "--no-reload")
