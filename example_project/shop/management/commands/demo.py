"""Enqueue a few searches and orders the way the views do, drain them with a worker, print counts."""

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from django_jobq.models import Job
from django_jobq.worker import Worker
from example_project.shop.models import Order
from example_project.shop.tasks import confirm_order, search


class Command(BaseCommand):
    help = "Run the django-jobq demo: enqueue, drain with a burst worker, print counts."

    def handle(self, *args: Any, **options: Any) -> None:
        queries = ["coffee beans", "green tea", "coffee beans", "espresso machine", "green tea"]
        for query in queries:
            job_id = search.using(dedupe_key=f"search:{query}").enqueue(query=query)
            self.stdout.write(
                f"search {query!r}: " + (f"job {job_id}" if job_id else "duplicate, not enqueued")
            )
        for email, cents in [("ada@example.com", 1200), ("bob@example.com", 0), ("cy@example.com", 4500)]:
            with transaction.atomic():
                order = Order.objects.create(email=email, total_cents=cents)
                confirm_order.enqueue(order_id=order.pk)
                if cents <= 0:
                    transaction.set_rollback(True)  # refused: neither the order nor its job remains
            self.stdout.write(
                f"order for {email}: " + ("refused, rolled back" if cents <= 0 else f"#{order.pk}")
            )
        self.stdout.write(f"before: {self._counts()}")
        worker = Worker({"interactive": 4, "outbox": 2}, burst=True)
        worker.run()
        self.stdout.write(f"worker {worker.worker_id} ran {worker.processed} job(s)")
        self.stdout.write(f"after:  {self._counts()}")
        confirmed = Order.objects.filter(confirmed_at__isnull=False).count()
        self.stdout.write(f"orders confirmed: {confirmed} of {Order.objects.count()}")

    @staticmethod
    def _counts() -> str:
        return ", ".join(f"{status}={n}" for status, n in Job.objects.counts().items())
