"""The example site's two ways of enqueueing, and its demo command."""

from io import StringIO

import pytest
from django.core.management import call_command

from django_jobq.models import Job
from example_project.shop.models import Order

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.p1, pytest.mark.django_db]


def test_search_view_deduplicates_active_searches(client):
    first = client.get("/search/", {"q": "Coffee"}).json()
    second = client.get("/search/", {"q": "coffee"}).json()
    assert first["job_id"] and not first["duplicate"]
    assert second == {"job_id": None, "duplicate": True}
    assert Job.objects.get().dedupe_key == "search:coffee"
    assert client.get("/search/").status_code == 400


def test_order_and_its_outbox_job_commit_together(client):
    response = client.post("/orders/", {"email": "a@example.com", "total_cents": "100"})
    assert response.status_code == 201
    order = Order.objects.get()
    job = Job.objects.get(id=response.json()["job_id"])
    assert (job.task, job.queue, job.payload) == ("shop.confirm_order", "outbox", {"order_id": order.pk})
    receipt = Job.objects.get(id=int(response.json()["receipt_id"]))  # Django's Tasks API, same transaction
    assert (receipt.task, receipt.queue, receipt.payload) == (
        "example_project.shop.tasks.email_receipt", "emails", {"args": [order.pk], "kwargs": {}},
    )  # fmt: skip


def test_refused_order_leaves_neither_row_nor_job(client):
    response = client.post("/orders/", {"email": "a@example.com", "total_cents": "0"})
    assert response.status_code == 400
    assert not Order.objects.exists() and not Job.objects.exists()


def run_demo() -> str:
    out = StringIO()
    call_command("demo", stdout=out)
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_demo_command_drains_what_it_enqueued():
    text = run_demo()
    assert "duplicate, not enqueued" in text and "refused, rolled back" in text
    assert "after:  PENDING=0, RUNNING=0, DONE=8, DEAD=1" in text  # the unknown SKU's restock
    assert "orders confirmed: 2 of 2" in text
    assert "receipts sent (django.tasks): ada@example.com, cy@example.com" in text


@pytest.mark.django_db(transaction=True)
def test_demo_starts_from_a_clean_slate_each_run():
    run_demo()
    text = run_demo()
    assert "clean slate: removed 9 job(s) and 2 order(s) of an earlier run" in text
    assert "before: PENDING=9, RUNNING=0, DONE=0, DEAD=0" in text
    assert "after:  PENDING=0, RUNNING=0, DONE=8, DEAD=1" in text
    assert "orders confirmed: 2 of 2" in text


@pytest.mark.django_db(transaction=True)
def test_demo_explains_what_it_showed_and_what_to_try_next(client):
    text = run_demo()
    assert "What happened:" in text and "Try next:" in text
    assert "manage.py jobq_stats" in text and "manage.py runserver" in text
    assert "http://127.0.0.1:8000/admin/django_jobq/job/dashboard/" in text
    # the login it prints works, and opens the dashboard it points to
    assert "log in as 'demo', password 'demo'" in text
    assert client.login(username="demo", password="demo")
    assert client.get("/admin/django_jobq/job/dashboard/").status_code == 200
