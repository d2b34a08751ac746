"""Enqueue a few searches and orders the way the views do, drain them with a worker, explain what happened."""

import os
import sys
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from django_jobq.models import Job, Schedule, WorkerRecord
from django_jobq.scheduler import Scheduler
from django_jobq.worker import Worker
from example_project.shop.models import Order
from example_project.shop.tasks import confirm_order, email_receipt, restock, search

DEMO_USER = ("demo", "demo")  # the example site's admin login, printed at the end; never for a real site


class Command(BaseCommand):
    help = "Run the django-jobq demo on a clean slate: enqueue, drain with a burst worker, explain."

    def handle(self, *args: Any, **options: Any) -> None:
        self.clean_slate()
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
                email_receipt.enqueue(order.pk)  # Django's Tasks API, in the same transaction
                if cents <= 0:
                    transaction.set_rollback(True)  # refused: neither the order nor its job remains
            self.stdout.write(
                f"order for {email}: " + ("refused, rolled back" if cents <= 0 else f"#{order.pk}")
            )
        for sku in ("beans-1kg", "oat-milk"):  # the second SKU is unknown: a dead letter
            self.stdout.write(f"restock {sku!r}: job {restock.enqueue(sku=sku)}")
        self.schedule_nightly_restock()
        self.stdout.write(f"before: {self._counts()}")
        worker = Worker({"interactive": 4, "outbox": 2, "emails": 1}, burst=True)
        worker.run()
        self.stdout.write(f"worker {worker.worker_id} ran {worker.processed} job(s)")
        self.stdout.write(f"after:  {self._counts()}")
        confirmed = Order.objects.filter(confirmed_at__isnull=False).count()
        self.stdout.write(f"orders confirmed: {confirmed} of {Order.objects.count()}")
        receipts = Job.objects.filter(task=email_receipt.module_path)
        sent = [
            str(email_receipt.get_result(str(job.id)).return_value["to"]) for job in receipts.order_by("id")
        ]
        self.stdout.write(f"receipts sent (django.tasks): {', '.join(sent)}")
        self.explain()

    def schedule_nightly_restock(self) -> None:
        """A cron schedule, as the admin would create it; one scheduler pass gives it its next tick."""
        Schedule.objects.create(
            name="nightly-restock", task=restock.name, cron="30 2 * * *", payload={"sku": "beans-1kg"}
        )
        Scheduler().run_once()
        schedule = Schedule.objects.get(name="nightly-restock")
        when = schedule.next_run_at.isoformat(timespec="minutes") if schedule.next_run_at else "?"
        self.stdout.write(f"schedule 'nightly-restock' (30 2 * * *): next run at {when}")

    def clean_slate(self) -> None:
        """Remove what an earlier run left (this is the example site's own database), so counts start at 0."""
        jobs, _ = Job.objects.all().delete()
        orders, _ = Order.objects.all().delete()
        WorkerRecord.objects.all().delete()
        Schedule.objects.filter(name="nightly-restock").delete()
        if jobs or orders:
            self.stdout.write(f"clean slate: removed {jobs} job(s) and {orders} order(s) of an earlier run")

    def explain(self) -> None:
        username, password = DEMO_USER
        users = get_user_model().objects
        if not users.filter(username=username).exists():
            users.create_superuser(username, f"{username}@example.com", password)
        python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else "python"
        database = settings.DATABASES["default"]
        url = os.environ.get("DATABASE_URL")
        prefix = f"DATABASE_URL={url} " if url else ""
        self.stdout.write(
            "\nWhat happened:\n"
            "  - 5 searches were enqueued with a dedupe key: the 2 repeats were refused while the first\n"
            "    search for the same words was still pending (the database's unique index decides).\n"
            "  - 3 orders were written, each with its confirmation job in the same transaction; the\n"
            "    refused one was rolled back and took its job with it (no order, no job).\n"
            "  - Each order also enqueued its receipt with Django's own Tasks API (@task from\n"
            "    django.tasks, TASKS on django_jobq.backend.JobqBackend): a row in the same table and\n"
            "    transaction, run by the same worker, its result read with get_result().\n"
            "  - 2 restocks were enqueued; the second names an unknown SKU, so its task raised\n"
            "    PermanentError and the job became a dead letter at once (the ERROR above): retrying\n"
            "    cannot fix it. The admin's dead letters show it, ready to requeue once the SKU exists.\n"
            "  - A cron schedule, nightly-restock, was created and one scheduler pass gave it its next\n"
            "    tick; `manage.py jobq_scheduler` publishes each tick once, however many run.\n"
            "  - A worker with three lanes (interactive: 4 slots, outbox: 2, emails: 1) ran every due job,\n"
            "    stored each result, and exited once nothing was due (--burst).\n"
            "\nTry next:\n"
            "  - the queue's figures in the terminal:\n"
            f"    {prefix}{python} manage.py jobq_stats\n"
            "  - the admin: the jobs with their payloads and results, the dead letters, the dashboard:\n"
            f"    {prefix}{python} manage.py runserver\n"
            "    then open http://127.0.0.1:8000/admin/django_jobq/job/dashboard/ and log in as "
            f"{username!r}, password {password!r}\n"
            "    (the dead letter: /admin/django_jobq/deadjob/, the schedule:\n"
            "    /admin/django_jobq/schedule/)\n"
            f"  - run the demo again: it starts from a clean slate (database {database['NAME']!r})\n"
        )

    @staticmethod
    def _counts() -> str:
        return ", ".join(f"{status}={n}" for status, n in Job.objects.counts().items())
