"""django-jobq through Django's Tasks API: bench.djtasks's @task functions on JobqBackend, enqueued
with Task.enqueue and run by the same jobq_worker command as native jobq tasks."""

from __future__ import annotations

from collections.abc import Callable

from bench.systems.base import DjangoTasksSystem, setup_django
from bench.systems.jobq import Jobq


class JobqTasks(DjangoTasksSystem):
    name = "jobq_tasks"
    label = "jobq via django.tasks"
    distribution = "django-jobq"
    modules = ("django_jobq", "django")
    peer = False
    remaining_sql = Jobq.remaining_sql
    worker_note = "jobq_worker, threads; LISTEN/NOTIFY, 1 s poll (Django's Tasks API)"

    def enqueue_batch(self, n: int, kind: str = "noop") -> None:
        """One commit: Django's Tasks API has no bulk enqueue, so one call per job in one transaction."""
        from django.db import transaction

        from bench.djtasks import BY_KIND

        task = BY_KIND[kind]
        with transaction.atomic():
            for _ in range(n):
                task.enqueue()

    def serve(self, slots: int, total: int, ready: Callable[[], None]) -> None:
        from django.core.management import call_command

        setup_django(self.name, self.db_url)
        import bench.djtasks  # noqa: F401  (the tasks' module: outside an installed app, imported here)

        ready()
        call_command("jobq_worker", "--queues", f"default:{slots}")
