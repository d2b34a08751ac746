"""The example site's tasks: a deduplicated search and a transactional-outbox confirmation."""

from django.utils import timezone

import django_jobq

from .models import Order


@django_jobq.task(name="shop.search", queue="interactive", priority=10)
def search(query: str) -> dict[str, object]:
    words = query.split()
    return {"query": query, "count": len(words)}


@django_jobq.task(name="shop.confirm_order", queue="outbox", max_attempts=10)
def confirm_order(order_id: int) -> dict[str, object]:
    updated = Order.objects.filter(pk=order_id, confirmed_at__isnull=True).update(confirmed_at=timezone.now())
    return {"order_id": order_id, "newly_confirmed": bool(updated)}
