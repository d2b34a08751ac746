"""Ways a view hands work to the queue: jobq's API, and Django's Tasks API on the same queue."""

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from .models import Order
from .tasks import confirm_order, email_receipt, search


def search_view(request: HttpRequest) -> JsonResponse:
    """Enqueue a search; the same query while one is pending or running is not enqueued twice."""
    query = request.GET.get("q", "").strip()
    if not query:
        return JsonResponse({"error": "q is required"}, status=400)
    job_id = search.using(dedupe_key=f"search:{query.lower()}").enqueue(query=query)
    return JsonResponse({"job_id": job_id, "duplicate": job_id is None}, status=202)


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Write the order and enqueue its confirmation in one transaction (outbox): both or neither."""
    email = request.POST.get("email", "")
    try:
        total = int(request.POST.get("total_cents", ""))
    except ValueError:
        return JsonResponse({"error": "total_cents must be an integer"}, status=400)
    with transaction.atomic():
        order = Order.objects.create(email=email, total_cents=total)
        job_id = confirm_order.enqueue(order_id=order.pk)
        receipt = email_receipt.enqueue(order.pk)  # Django's API: same table, same transaction
        if total <= 0:
            transaction.set_rollback(True)  # a refused order leaves neither a row nor a job
            return JsonResponse({"error": "total_cents must be positive"}, status=400)
    return JsonResponse({"order_id": order.pk, "job_id": job_id, "receipt_id": receipt.id}, status=201)
