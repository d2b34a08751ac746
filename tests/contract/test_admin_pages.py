"""The admin and jobq_stats on each engine: every page renders the queue's figures, the dead letters
are grouped by exception class, and the guarded delete never removes a running job."""

from io import StringIO

import pytest
from django.core.management import call_command

from django_jobq.models import Job, JobStatus

pytestmark = [pytest.mark.contract, pytest.mark.p1, pytest.mark.django_db]


def _jobs() -> tuple[int, int, int]:
    done = Job.objects.enqueue("test.echo", {"n": 1})
    Job.objects.complete(Job.objects.claim("w1").id, "w1", {"ok": True})
    dead = Job.objects.enqueue("test.echo", {"n": 2}, max_attempts=1)
    Job.objects.claim("w1")
    Job.objects.fail(dead, "w1", "Traceback (most recent call last):\n  ...\nValueError: boom")
    running = Job.objects.enqueue("test.echo", {"n": 3})
    Job.objects.claim("w1")
    return done, dead, running


def test_every_page_renders(admin_client):
    done, _dead, running = _jobs()
    Job.objects.worker_beat("w1", hostname="h", pid=1, lanes={"default": 1}, running=1, stopped=False)
    Job.objects.pause_queue("default")
    for url in (
        "/admin/django_jobq/job/dashboard/",
        "/admin/django_jobq/job/",
        f"/admin/django_jobq/job/{done}/change/",
        f"/admin/django_jobq/job/{running}/change/",
        "/admin/django_jobq/deadjob/",
        "/admin/django_jobq/workerrecord/",
    ):
        assert admin_client.get(url).status_code == 200, url
    dashboard = admin_client.get("/admin/django_jobq/job/dashboard/").content.decode()
    assert "default" in dashboard and "w1" in dashboard


def test_dead_letters_are_grouped_by_the_exception_class():
    from django_jobq.dashboard import ExceptionClass

    _jobs()
    (row,) = Job.objects.filter(status=JobStatus.DEAD).annotate(parsed=ExceptionClass("last_error"))
    assert row.parsed == "ValueError"
    assert row.exception == "ValueError"  # written by the statement that made it DEAD


def test_the_admin_delete_keeps_a_running_job(admin_client):
    done, _dead, running = _jobs()
    response = admin_client.post(
        "/admin/django_jobq/job/",
        {"action": "delete_selected", "_selected_action": [done, running], "post": "yes"},
    )
    assert response.status_code in (200, 302)
    assert not Job.objects.filter(id=done).exists()
    assert Job.objects.get(id=running).status == JobStatus.RUNNING


def test_jobq_stats_counts_each_status():
    _jobs()
    out = StringIO()
    call_command("jobq_stats", stdout=out)
    line = next(x for x in out.getvalue().splitlines() if x.startswith("default"))
    assert line.split()[:4] == ["default", "0", "0", "-"]  # nothing pending, so no lag


def test_search_by_tag_and_by_payload_containment(admin_client):
    tenant = Job.objects.enqueue(
        "test.echo", {"order_id": 42, "shop": {"id": 7, "tier": "gold"}}, tags=["tenant:42"]
    )
    other = Job.objects.enqueue("test.echo", {"order_id": 43, "shop": {"id": 7}}, tags=["tenant:7", "x"])
    plain = Job.objects.enqueue("test.echo", {"order_id": 42})

    def found(term: str) -> set[int]:
        response = admin_client.get("/admin/django_jobq/job/", {"q": term})
        assert response.status_code == 200
        return {job.pk for job in response.context["cl"].result_list}

    assert found("tag:tenant:42") == {tenant}
    assert found("tag: x") == {other}
    assert found("tag:tenant") == set()  # a whole tag, not a prefix
    assert found('{"order_id": 42}') == {tenant, plain}
    assert found('{"shop": {"id": 7}}') == {tenant, other}
    assert found('{"shop": {"tier": "gold"}, "order_id": 42}') == {tenant}
    assert found('{"order_id": "42"}') == set()  # JSON types count
    page = admin_client.get("/admin/django_jobq/job/").content.decode()
    assert "?q=tag%3Atenant%3A42" in page  # each tag links to its jobs
    for bad in ('{"order_id": ', "{}", "tag:", "tag:" + "x" * 101, '{"a": "\\u0000"}'):
        response = admin_client.get("/admin/django_jobq/job/", {"q": bad}, follow=True)
        assert response.status_code == 200 and not response.context["cl"].result_list, bad
        assert [m.level_tag for m in response.context["messages"]] == ["warning"], bad


def test_workflow_pages_and_waiting_counts(admin_client):
    from django_jobq import dashboard
    from django_jobq.workflows import Signature, chain

    workflow = chain(Signature("test.echo", {"n": 1}), Signature("test.echo", {"n": 2})).enqueue(name="two")
    first, second = workflow.job_ids
    for url in (
        "/admin/django_jobq/workflow/",
        f"/admin/django_jobq/workflow/{workflow.id}/change/",
        f"/admin/django_jobq/job/{second}/change/",
        f"/admin/django_jobq/job/?workflow={workflow.id}",
    ):
        assert admin_client.get(url).status_code == 200, url
    assert dashboard.snapshot().total.waiting == 1
    (unfinished,) = dashboard.unfinished_workflows()
    assert (unfinished.id, unfinished.counts) == (workflow.id, {"PENDING": 1, "WAITING": 1})
    page = admin_client.get("/admin/django_jobq/job/dashboard/").content.decode()
    assert f"/admin/django_jobq/workflow/{workflow.id}/change/" in page
    admin_client.post(f"/admin/django_jobq/workflow/{workflow.id}/cancel/")
    assert set(Job.objects.filter(pk__in=[first, second]).values_list("status", flat=True)) == {
        JobStatus.CANCELLED
    }
    assert dashboard.unfinished_workflows() == []
