"""Workflows in the admin: the list (jobs per state, the overall state), a workflow's page (its jobs in
id order with their edges), "Cancel workflow" (permission, log, the handle's cancel), the job list's
workflow filter and search, a job's Workflow section, WAITING in the status filter, and the
dashboard's waiting counts and unfinished workflows (one more statement, on the partial indexes)."""

from io import StringIO

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.db import connection

from django_jobq import dashboard
from django_jobq.models import Job, JobStatus, Workflow
from django_jobq.sql.postgres import stats
from django_jobq.workflows import Signature, chain, group
from tests.conftest import explain, plan_nodes

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

WORKFLOWS = "/admin/django_jobq/workflow/"
JOBS = "/admin/django_jobq/job/"
DASHBOARD = "/admin/django_jobq/job/dashboard/"


def _order() -> tuple[int, list[int]]:
    """a -> (b, c) -> d in queue "emails": a PENDING, b, c, d WAITING."""
    wf = chain(
        Signature("test.echo", {"n": 1}, queue="emails"),
        group(
            Signature("test.echo", {"n": 2}), Signature("test.echo", {"n": 3}), then=Signature("test.noop")
        ),
    ).enqueue(name="order 42")
    return wf.id, list(wf.job_ids)


def _finish(job_id: int) -> None:
    run = Job.objects.claim("w1", queues=[Job.objects.get(pk=job_id).queue])
    assert run is not None and run.id == job_id
    assert Job.objects.complete(run.id, "w1", {"ok": True}, fence=run.fence)


@pytest.mark.p1
def test_the_workflow_list_counts_jobs_per_state(admin_client):
    running_id, _ = _order()
    done_id, _ = _order()
    Job.objects.filter(workflow_id=done_id).update(status=JobStatus.DONE, waiting_on=0)
    failed_id, ids = _order()
    Job.objects.filter(pk=ids[0]).update(status=JobStatus.DEAD)
    Job.objects.filter(pk__in=ids[1:]).update(status=JobStatus.CANCELLED)

    response = admin_client.get(WORKFLOWS)
    assert response.status_code == 200
    rows = {w.pk: w for w in response.context["cl"].result_list}
    assert (rows[running_id].jobs_pending, rows[running_id].jobs_waiting) == (1, 3)
    assert rows[done_id].jobs_done == 4 and rows[failed_id].jobs_cancelled == 3
    page = response.content.decode()
    assert page.count('class="jobq-status jobq-running">running<') == 1
    assert page.count('class="jobq-status jobq-done">succeeded<') == 1
    assert page.count('class="jobq-status jobq-dead">failed<') == 1
    assert f"q=workflow%3A{running_id}&amp;status__exact=5" in page  # the 3 waiting jobs, a link
    assert admin_client.get(WORKFLOWS, {"q": "order 42"}).context["cl"].result_count == 3
    assert "Add workflow" not in page and "/add/" not in page.split('id="content-main"')[1]


@pytest.mark.p1
def test_a_workflow_page_lists_its_jobs_in_order_with_their_edges(admin_client):
    workflow_id, (a, b, c, d) = _order()
    _finish(a)  # b and c become PENDING
    response = admin_client.get(f"{WORKFLOWS}{workflow_id}/change/")
    assert response.status_code == 200
    assert [row["job"].pk for row in response.context["rows"]] == [a, b, c, d]
    rows = {row["job"].pk: row for row in response.context["rows"]}
    assert rows[a]["waits_for"] == [] and rows[a]["needed_by"] == [b, c]
    assert rows[b]["waits_for"] == [(a, True)]  # resolved: a is DONE
    assert rows[d]["waits_for"] == [(b, False), (c, False)] and rows[d]["job"].waiting_on == 2
    assert [rows[pk]["state"] for pk in (a, b, c, d)] == [
        JobStatus.DONE, JobStatus.PENDING, JobStatus.PENDING, JobStatus.WAITING,
    ]  # fmt: skip
    page = response.content.decode()
    assert f'href="/admin/django_jobq/job/{a}/change/"' in page and f"<s>{a}</s>" in page
    assert "order 42" in page and 'id="jobq-cancel-workflow"' in page
    assert "Cancel workflow" in page
    assert admin_client.get(f"{WORKFLOWS}999999/change/").status_code == 302  # no such workflow


@pytest.mark.p1
def test_cancel_workflow_needs_the_cancel_permission_and_is_logged(staff, admin_client):
    workflow_id, ids = _order()
    viewer = staff("view_job")
    assert viewer.get(WORKFLOWS).status_code == 200
    assert "Cancel workflow" not in viewer.get(f"{WORKFLOWS}{workflow_id}/change/").content.decode()
    assert viewer.post(f"{WORKFLOWS}{workflow_id}/cancel/").status_code == 403
    assert staff("requeue_job").get(WORKFLOWS).status_code == 403
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {
        JobStatus.PENDING, JobStatus.WAITING,
    }  # fmt: skip

    canceller = staff("view_job", "cancel_job")
    assert canceller.get(f"{WORKFLOWS}{workflow_id}/cancel/").status_code == 405
    response = canceller.post(f"{WORKFLOWS}{workflow_id}/cancel/", follow=True)
    assert response.status_code == 200
    assert "cancelled 4 job(s)" in response.content.decode()
    jobs = Job.objects.filter(pk__in=ids)
    assert set(jobs.values_list("status", flat=True)) == {JobStatus.CANCELLED}
    assert set(jobs.values_list("cancelled_by", flat=True)) == {f"admin {canceller.user.username}"}
    entry = LogEntry.objects.get(object_id=str(workflow_id))
    assert entry.user == canceller.user and "Cancelled" in entry.get_change_message()
    page = canceller.get(f"{WORKFLOWS}{workflow_id}/change/").content.decode()
    assert 'id="jobq-cancel-workflow"' not in page  # finished: nothing left to cancel

    other_id, other_ids = _order()  # the list's action
    admin_client.post(WORKFLOWS, {"action": "cancel_workflows", "_selected_action": [other_id]})
    assert set(Job.objects.filter(pk__in=other_ids).values_list("status", flat=True)) == {JobStatus.CANCELLED}


@pytest.mark.p1
def test_the_job_list_filters_by_workflow_and_a_job_page_shows_its_edges(admin_client):
    workflow_id, (a, b, c, d) = _order()
    _order()  # another workflow's jobs stay out
    Job.objects.enqueue("test.echo", {})
    listed = admin_client.get(JOBS, {"workflow": workflow_id}).context["cl"].result_list
    assert sorted(job.pk for job in listed) == [a, b, c, d]
    searched = admin_client.get(JOBS, {"q": f"workflow:{workflow_id}"}).context["cl"].result_list
    assert sorted(job.pk for job in searched) == [a, b, c, d]
    bad = admin_client.get(JOBS, {"q": "workflow:x"})
    assert len(bad.context["cl"].result_list) == 0 and "takes a workflow id" in bad.content.decode()
    waiting = admin_client.get(JOBS, {"status__exact": int(JobStatus.WAITING), "workflow": workflow_id})
    assert sorted(job.pk for job in waiting.context["cl"].result_list) == [b, c, d]
    assert "?status__exact=5" in waiting.content.decode()  # WAITING among the status filter's choices

    page = admin_client.get(f"{JOBS}{d}/change/").content.decode()
    assert f'href="/admin/django_jobq/workflow/{workflow_id}/change/"' in page
    assert f'href="/admin/django_jobq/job/{b}/change/">{b}</a>' in page  # waits for b and c
    assert "2 unfinished; runs even when one of them fails" in page  # a group's callback: then_on_failure
    page = admin_client.get(f"{JOBS}{b}/change/").content.decode()
    assert "1 unfinished; cancelled when one of them fails" in page
    page = admin_client.get(f"{JOBS}{a}/change/").content.decode()
    assert f'href="/admin/django_jobq/job/{c}/change/">{c}</a>' in page  # needed by b and c
    plain = Job.objects.enqueue("test.echo", {})
    assert "jobq-workflow-link" not in admin_client.get(f"{JOBS}{plain}/change/").content.decode()


@pytest.mark.p1
def test_the_job_list_cancel_action_cancels_waiting_jobs(admin_client):
    _, ids = _order()
    admin_client.post(JOBS, {"action": "cancel_selected", "_selected_action": ids[1:], "post": "yes"})
    assert Job.objects.filter(pk__in=ids[1:], status=JobStatus.CANCELLED).count() == 3


@pytest.mark.p1
def test_the_dashboard_shows_waiting_jobs_and_unfinished_workflows(
    admin_client, django_assert_max_num_queries
):
    workflow_id, _ = _order()
    finished_id, _ = _order()
    Job.objects.filter(workflow_id=finished_id).update(status=JobStatus.DONE, waiting_on=0)
    snap = dashboard.snapshot()
    queues = {q.queue: q for q in snap.queues}
    assert (queues["default"].waiting, queues["emails"].waiting, snap.total.waiting) == (3, 0, 3)
    assert queues["emails"].pending == 1
    (unfinished,) = dashboard.unfinished_workflows()
    assert (unfinished.id, unfinished.name, unfinished.counts) == (
        workflow_id, "order 42", {"PENDING": 1, "WAITING": 3},
    )  # fmt: skip
    # the snapshot's 8 statements (ACTIVE counts the WAITING jobs too; the seats held: the test app
    # registers tasks with a max_running), the workflows, the session, the user
    with django_assert_max_num_queries(11):
        response = admin_client.get(DASHBOARD)
    page = response.content.decode()
    assert (
        'id="jobq-workflows"' in page and f'href="/admin/django_jobq/workflow/{workflow_id}/change/"' in page
    )
    assert f'href="/admin/django_jobq/workflow/{finished_id}/change/"' not in page
    assert 'queue=default&amp;status__exact=5">3</a>' in page

    out = StringIO()
    call_command("jobq_stats", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[1].split()[:8] == ["queue", "pending", "due", "lag", "running", "expired", "waiting", "dead"]
    default = next(line for line in lines if line.startswith("default"))
    assert default.split()[6] == "3"


@pytest.mark.p1
def test_the_waiting_and_workflow_statements_read_their_indexes():
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO jobq_job (task, queue, payload, status, priority, run_at, attempts, max_attempts,
                                     errors, created_at, finished_at, workflow_id)
               SELECT 'test.echo', 'default', '{}', CASE WHEN i % 500 = 0 THEN 5 ELSE 2 END, 100, now(), 1,
                      5, '[]', now(), CASE WHEN i % 500 = 0 THEN NULL ELSE now() END,
                      CASE WHEN i % 10 = 0 THEN i / 100 END
               FROM generate_series(1, 50000) AS i"""
        )
        cursor.execute("ANALYZE jobq_job")
    waiting = {n.get("Index Name") for n in plan_nodes(explain(stats.ACTIVE))}
    assert "jobq_job_waiting" in waiting
    plan = explain(stats.WORKFLOWS, {"limit": 20})
    assert "jobq_job_workflow" in {n.get("Index Name") for n in plan_nodes(plan)}
    assert not [
        n for n in plan_nodes(plan) if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobq_job"
    ]
    assert Workflow.objects.count() == 0 and len(dashboard.unfinished_workflows()) == 20
