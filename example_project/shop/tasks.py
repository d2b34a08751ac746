"""The example site's tasks: a deduplicated search, a transactional-outbox confirmation and a restock
that can fail for good (jobq's @task), and a receipt written with Django's own Tasks API
(django.tasks's @task on JobqBackend)."""

from django.utils import timezone

import django_jobq
from django_jobq.backend.compat import task  # django.tasks.task (Django 6), django_tasks.task (5.2)

from .models import Order


@django_jobq.task(name="shop.search", queue="interactive", priority=10)
def search(query: str) -> dict[str, object]:
    words = query.split()
    return {"query": query, "count": len(words)}


@django_jobq.task(name="shop.confirm_order", queue="outbox", max_attempts=10)
def confirm_order(order_id: int) -> dict[str, object]:
    updated = Order.objects.filter(pk=order_id, confirmed_at__isnull=True).update(confirmed_at=timezone.now())
    return {"order_id": order_id, "newly_confirmed": bool(updated)}


KNOWN_SKUS = {"beans-1kg", "tea-100g"}


@django_jobq.task(name="shop.restock", queue="outbox")
def restock(sku: str) -> dict[str, object]:
    """Retrying cannot help an unknown SKU: PermanentError makes the job a dead letter at once."""
    if sku not in KNOWN_SKUS:
        raise django_jobq.PermanentError(f"unknown SKU {sku!r}: fix the catalogue, then requeue the job")
    return {"sku": sku, "ordered": True}


@task(queue_name="emails")
def email_receipt(order_id: int) -> dict[str, object]:
    """A Django task: ``email_receipt.enqueue(order.pk)`` writes a jobq row; jobq_worker runs it."""
    order = Order.objects.get(pk=order_id)
    return {"order_id": order_id, "to": order.email, "sent": True}
