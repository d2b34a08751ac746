"""The console's bulk actions (django_jobq.admin.actions, django_jobq.console.bulk): every list action
confirms the exact number of jobs it changes; "select all matching" runs as one job of the queue, in
batches, with its progress shown, stoppable, logged once, and safe to run again after a crash."""

import datetime as dt
import re

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.messages import get_messages
from django.core import signing
from django.utils import timezone

from django_jobq.admin import JobAdmin, listing
from django_jobq.console import bulk
from django_jobq.console.selection import Selection
from django_jobq.exceptions import BadSelection
from django_jobq.models import BulkAction, Job, JobStatus
from tests.conftest import wait_until
from tests.integration.conftest import dead_job, make_job, running_job

pytestmark = [pytest.mark.integration, pytest.mark.django_facing, pytest.mark.django_db]

JOBS = "/admin/django_jobq/job/"
DEAD = "/admin/django_jobq/deadjob/"
BULK = "/admin/django_jobq/bulkaction/"


def select_all(client, url: str, action: str, *, confirm: dict | None = None, **data):
    """Post ``action`` with "select all matching" from the list at ``url`` (its filter in the query
    string); with ``confirm`` (the confirmation page's hidden fields), its confirmation."""
    ticked = [str(job.pk) for job in Job.objects.order_by("-id")[:1]]  # the page's ticked boxes
    payload = {"action": action, "select_across": "1", "_selected_action": ticked, **data}
    if confirm is None:
        payload["index"] = "0"
    else:
        payload.update(confirm)
    return client.post(url, payload)


def confirmation(page) -> dict:
    """The hidden fields a confirmation page posts back (with post=yes)."""
    html = page.content.decode()
    token = re.search(r'name="jobq_selection" value="([^"]+)"', html)
    return {"post": "yes", **({"jobq_selection": token.group(1)} if token else {})}


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def statuses(jobs) -> set[JobStatus]:
    return set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True))


def run_to_the_end(action: BulkAction, size: int) -> list[int]:
    """Run the action's batches here until it ends; how many jobs each batch went through."""
    action.refresh_from_db()
    seen, sizes = action.done + action.skipped, []
    while (after := bulk.run_batch(action.pk, size)).state == BulkAction.State.RUNNING:
        sizes.append(after.done + after.skipped - seen)
        seen = after.done + after.skipped
    return sizes


@pytest.mark.p0
def test_select_all_offers_no_estimate_and_the_confirmation_counts_exactly(admin_client, monkeypatch):
    """The list estimates its total past ESTIMATE_COUNT_ABOVE: "select all" then names no number, and
    the action's confirmation page gives the exact count of the jobs it will change (not the estimate)."""
    monkeypatch.setattr(listing, "ESTIMATE_COUNT_ABOVE", 5)
    monkeypatch.setattr(JobAdmin, "list_per_page", 10)
    dead = [dead_job(queue="emails") for _ in range(23)]
    make_job(queue="emails")  # PENDING: not requeued, not counted
    page = admin_client.get(JOBS + "?queue=emails").content.decode()
    assert page.count("Select all matching jobs (about ") == 1 and "Select all 24" not in page
    confirm = select_all(admin_client, JOBS + "?queue=emails", "requeue_selected")
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "Requeue 23 jobs?" in html and "<strong>23</strong>" in html
    assert statuses(dead) == {JobStatus.DEAD} and not BulkAction.objects.exists()  # nothing yet
    # Below the bound the list counts exactly, and says so.
    monkeypatch.setattr(listing, "ESTIMATE_COUNT_ABOVE", 10_000)
    assert "Select all 24 jobs" in admin_client.get(JOBS + "?queue=emails").content.decode()


@pytest.mark.p0
def test_ticked_jobs_are_changed_in_the_request_and_logged_once(admin_client):
    jobs = [dead_job() for _ in range(3)]
    confirm = admin_client.post(
        DEAD, {"action": "requeue_selected", "index": "0", "_selected_action": [j.pk for j in jobs]}
    )
    assert "Requeue 3 jobs?" in confirm.content.decode()
    admin_client.post(
        DEAD, {"action": "requeue_selected", "_selected_action": [j.pk for j in jobs], "post": "yes"}
    )
    assert statuses(jobs) == {JobStatus.PENDING}
    assert not BulkAction.objects.exists()  # no background job for a few ticked jobs
    assert LogEntry.objects.count() == 1


@pytest.mark.p0
@pytest.mark.django_db(transaction=True)
def test_select_all_runs_as_one_job_that_a_worker_completes_in_batches(admin_client, settings, worker_thread):
    settings.JOBQ = {**settings.JOBQ, "BULK_BATCH": 7, "BULK_REQUEUE_SPREAD_SECONDS": 120}
    chosen = [dead_job(queue="emails", task="shop.sync") for _ in range(30)]
    other_queue = [dead_job(queue="reports", task="shop.sync") for _ in range(4)]
    other_task = dead_job(queue="emails", task="shop.other")
    url = DEAD + "?queue=emails&task=shop.sync"
    page = select_all(admin_client, url, "requeue_selected")
    assert "Requeue 30 jobs?" in page.content.decode() and "batches of 7 jobs" in page.content.decode()
    response = select_all(admin_client, url, "requeue_selected", confirm=confirmation(page))
    assert response.status_code == 302
    action = BulkAction.objects.get()
    assert (action.action, action.total, action.state, action.query) == (
        "requeue",
        30,
        "running",
        "queue=emails&task=shop.sync",
    )
    job = Job.objects.get(pk=action.job_id)
    assert (job.task, job.queue, job.payload) == (
        "django_jobq.admin_bulk",
        "default",
        {"action_id": action.pk},
    )
    assert statuses(chosen) == {JobStatus.DEAD}  # nothing changed in the request
    assert "Bulk requeue of 30 job(s) started in the background" in messages_of(response)[0]
    entry = LogEntry.objects.get()  # one entry for the whole action
    assert (entry.action_flag, entry.object_id, entry.content_type.model_class()) == (
        CHANGE,
        str(action.pk),
        BulkAction,
    )
    assert "30 job(s) matching ?queue=emails&task=shop.sync" in entry.change_message

    worker_thread({"default": 1})  # a real worker of the queue; the emails queue has none
    wait_until(lambda: BulkAction.objects.get().state == "done", message="the bulk action to finish")
    action.refresh_from_db()
    assert (action.done, action.skipped, action.cursor) == (30, 0, max(j.pk for j in chosen))
    assert statuses(chosen) == {JobStatus.PENDING}
    assert statuses([*other_queue, other_task]) == {JobStatus.DEAD}
    job = wait_until(lambda: Job.objects.filter(pk=action.job_id, status=JobStatus.DONE).first())
    assert job.result == {"state": "done", "done": 30, "skipped": 0}
    assert job.progress == {"done": 30, "total": 30}  # recorded after each batch
    # Spread over the interval from when it was asked, not all due at once.
    run_ats = list(Job.objects.filter(pk__in=[j.pk for j in chosen]).values_list("run_at", flat=True))
    start = action.created_at
    assert all(start <= run_at <= start + dt.timedelta(seconds=120) for run_at in run_ats)
    assert len(set(run_ats)) > 1
    assert LogEntry.objects.count() == 1


@pytest.mark.p1
def test_batches_are_bounded_progress_is_shown_and_a_stop_ends_it_between_batches(admin_client, settings):
    settings.JOBQ = {**settings.JOBQ, "BULK_BATCH": 5}
    pending = [make_job(queue="bulk") for _ in range(12)]
    url = JOBS + "?status__exact=0&queue=bulk"
    page = select_all(admin_client, url, "cancel_selected")
    assert "Cancel 12 jobs?" in page.content.decode()
    select_all(admin_client, url, "cancel_selected", confirm=confirmation(page))
    action = BulkAction.objects.get()
    assert bulk.run_batch(action.pk, 5).done == 5  # one batch: five jobs, one transaction
    listed = admin_client.get(BULK).content.decode()
    assert 'value="5" max="12"' in listed and "running: 5 changed, 0 left as they were" in listed
    stop = admin_client.post(BULK, {"action": "stop_selected", "index": "0", "_selected_action": [action.pk]})
    assert stop.status_code == 302
    assert "(stop requested)" in admin_client.get(BULK).content.decode()
    after = bulk.run_batch(action.pk, 5)
    assert (after.state, after.done) == ("cancelled", 5)
    assert Job.objects.filter(pk__in=[j.pk for j in pending], status=JobStatus.CANCELLED).count() == 5
    assert Job.objects.filter(pk__in=[j.pk for j in pending], status=JobStatus.PENDING).count() == 7
    assert bulk.run_batch(action.pk, 5).done == 5  # a stopped action stays stopped
    assert not bulk.request_cancel(action.pk)


@pytest.mark.p1
def test_an_action_whose_job_ended_dead_is_shown_halted_resumes_on_requeue_and_stops_at_once(admin_client):
    """Its job ended DEAD (a run that kept failing): the action says so instead of "running"; a
    requeue of the job resumes it from its cursor; a stop asked of a halted action ends it at once
    (no batch is left to see the request)."""
    pending = [make_job(queue="bulk") for _ in range(6)]
    action = bulk.start(
        "cancel", Selection(queue="bulk", until=pending[-1].pk), 6, options={}, by="root", query=""
    )
    bulk.run_batch(action.pk, 2)
    assert "halted" not in admin_client.get(BULK).content.decode()
    Job.objects.filter(pk=action.job_id).update(status=JobStatus.DEAD, finished_at=timezone.now())
    listed = admin_client.get(BULK).content.decode()
    assert "running: 2 changed, 0 left as they were; halted: its job ended DEAD" in listed
    Job.objects.filter(pk=action.job_id).update(status=JobStatus.PENDING, finished_at=None)  # requeued
    assert "halted" not in admin_client.get(BULK).content.decode()
    assert run_to_the_end(action, 2) == [2, 2]  # from its cursor: the four jobs left
    second = bulk.start(
        "cancel", Selection(queue="bulk", until=pending[-1].pk), 6, options={}, by="root", query=""
    )
    Job.objects.filter(pk=second.job_id).delete()
    assert "halted: its job is gone" in admin_client.get(BULK).content.decode()
    admin_client.post(BULK, {"action": "stop_selected", "index": "0", "_selected_action": [second.pk]})
    second.refresh_from_db()
    assert second.state == BulkAction.State.CANCELLED and second.finished_at is not None
    live = bulk.start(
        "cancel", Selection(queue="bulk", until=pending[-1].pk), 6, options={}, by="root", query=""
    )
    assert bulk.request_cancel(live.pk)  # its job is PENDING: it stops at its next batch
    live.refresh_from_db()
    assert live.state == BulkAction.State.RUNNING and live.cancel_requested_at is not None


@pytest.mark.p1
def test_stopping_a_bulk_action_needs_the_permission_of_what_it_does(staff):
    job = make_job(queue="bulk")
    action = bulk.start(
        "cancel",
        bulk.Selection(queue="bulk", until=job.pk),
        1,
        options={},
        by="admin root",
        query="queue=bulk",
    )
    viewer = staff("view_job", "requeue_job")
    assert viewer.get(BULK).status_code == 200
    viewer.post(BULK, {"action": "stop_selected", "index": "0", "_selected_action": [action.pk]})
    action.refresh_from_db()
    assert action.cancel_requested_at is None
    assert staff().get(BULK).status_code == 403


@pytest.mark.p0
def test_a_rerun_after_a_crash_neither_skips_nor_acts_twice(admin_client, monkeypatch):
    """A worker killed mid-batch: that batch's transaction leaves nothing; the job run again continues
    from the committed cursor. A job a committed batch requeued, dead again since, is not requeued a
    second time by this action; the jobs of the lost batch are not skipped."""
    jobs = [dead_job(queue="emails") for _ in range(9)]
    page = select_all(admin_client, DEAD + "?queue=emails", "requeue_selected")
    select_all(admin_client, DEAD + "?queue=emails", "requeue_selected", confirm=confirmation(page))
    action = BulkAction.objects.get()
    assert bulk.run_batch(action.pk, 4).done == 4
    first = jobs[0]
    Job.objects.filter(pk=first.pk).update(status=JobStatus.DEAD)  # it ran and died again since

    real_save = BulkAction.save

    def crash(self, *args, **kwargs):  # the worker dies after changing the jobs, before committing
        raise SystemExit("killed")

    monkeypatch.setattr(BulkAction, "save", crash)
    with pytest.raises(SystemExit):
        bulk.run_batch(action.pk, 4)
    assert statuses(jobs[4:]) == {JobStatus.DEAD}  # the lost batch left nothing
    monkeypatch.setattr(BulkAction, "save", real_save)
    assert run_to_the_end(action, 4) == [4, 1]
    action.refresh_from_db()
    assert (action.state, action.done, action.skipped) == ("done", 9, 0)
    assert statuses(jobs[1:]) == {JobStatus.PENDING}
    assert statuses([first]) == {JobStatus.DEAD}  # behind the cursor: not requeued twice


@pytest.mark.p0
@pytest.mark.django_db(transaction=True)
def test_a_bulk_job_whose_worker_died_runs_again_after_its_lease_and_continues(
    admin_client, settings, worker_thread
):
    """The bulk job's worker dies after a batch: the reaper gives the job back once its lease expires, a
    real worker runs it again, and it continues from the committed cursor."""
    settings.JOBQ = {**settings.JOBQ, "BULK_BATCH": 3, "BULK_REQUEUE_SPREAD_SECONDS": 0}
    jobs = [dead_job(queue="emails") for _ in range(10)]
    page = select_all(admin_client, DEAD + "?queue=emails", "requeue_selected")
    select_all(admin_client, DEAD + "?queue=emails", "requeue_selected", confirm=confirmation(page))
    action = BulkAction.objects.get()
    ghost = Job.objects.claim("ghost-1", queues=["default"], lease_seconds=0.05)  # a worker takes it,
    assert ghost is not None and ghost.pk == action.job_id
    assert bulk.run_batch(action.pk, 3).done == 3  # runs one batch, and is killed: no heartbeat, no outcome
    Job.objects.filter(pk=jobs[0].pk).update(status=JobStatus.DEAD)  # requeued, ran, died again since
    assert wait_until(lambda: Job.objects.reap(), message="the lease to expire") == [action.job_id]
    worker_thread({"default": 1})
    wait_until(lambda: BulkAction.objects.get().state == "done", message="the re-run to finish")
    action.refresh_from_db()
    assert (action.done, action.skipped) == (10, 0)
    assert statuses(jobs[1:]) == {JobStatus.PENDING}
    assert statuses(jobs[:1]) == {JobStatus.DEAD}  # behind the cursor: not requeued a second time
    job = wait_until(lambda: Job.objects.filter(pk=action.job_id, status=JobStatus.DONE).first())
    assert job.attempts == 2  # the lost run, then the one that finished


@pytest.mark.p1
def test_select_all_delete_and_the_jobs_enqueued_after_the_confirmation(admin_client):
    dead = [dead_job(exc="KeyError") for _ in range(3)]
    kept = dead_job(exc="ValueError")
    url = DEAD + "?exception=KeyError&_facets=True&o=-1"  # "show counts" and the sort select nothing
    page = select_all(admin_client, url, "delete_selected")
    assert "Delete 3 jobs?" in page.content.decode()
    later = dead_job(exc="KeyError")  # enqueued (and dead) after the operator saw the count
    select_all(admin_client, url, "delete_selected", confirm=confirmation(page))
    action = BulkAction.objects.get()
    run_to_the_end(action, 500)
    assert not Job.objects.filter(pk__in=[j.pk for j in dead]).exists()
    assert Job.objects.filter(pk__in=[kept.pk, later.pk]).count() == 2
    assert LogEntry.objects.get().action_flag == DELETION


@pytest.mark.p0
@pytest.mark.parametrize(
    "query",
    [
        "?q=%00",  # a NUL byte: the list refuses it first
        "?queue=emails%00",
        "?queue=emails&queue=reports",  # a filter given twice
        "?payload__contains=%7B%7D",  # a lookup the address can add but no selection rebuilds
        "?workflow=1%3B%20DROP%20TABLE%20jobq_job",
        "?id__gt=0",
    ],
)
def test_hostile_filters_are_refused_before_anything_is_done(admin_client, query):
    jobs = [make_job(queue="emails")]
    response = select_all(admin_client, JOBS + query, "cancel_selected")
    assert response.status_code == 302
    assert messages_of(response)[0].startswith(("Nothing was done: ", "Null characters are not allowed."))
    assert statuses(jobs) == {JobStatus.PENDING} and not BulkAction.objects.exists()


@pytest.mark.p0
@pytest.mark.parametrize(
    ("key", "value"), [("q", "a\x00b"), ("task", "shop\ud800"), ("queue", " padded "), ("status__exact", "9")]
)
def test_a_selection_refuses_values_it_could_not_store(key, value):
    with pytest.raises(BadSelection):
        Selection.from_query({key: [value]}, dead=False, database="default")
    with pytest.raises(BadSelection):
        Selection.from_dict({"search": "a\x00b"})


@pytest.mark.p0
def test_injection_looking_values_select_nothing_and_forged_confirmations_are_refused(admin_client):
    job = make_job(queue="emails")
    url = JOBS + "?queue=emails'%20OR%20'1'='1&task=x%22%3B--"
    page = select_all(admin_client, url, "cancel_selected")
    assert "Cancel 0 jobs?" in page.content.decode()  # values, never SQL
    fields = confirmation(page)
    forged = signing.dumps(
        {"kind": "cancel", "selection": {"until": job.pk}, "count": 0}, salt="not the console's"
    )
    for token in (forged, fields["jobq_selection"][:-2] + "xx"):
        response = select_all(
            admin_client, url, "cancel_selected", confirm={**fields, "jobq_selection": token}
        )
        assert "Nothing was done" in messages_of(response)[0]
    # A valid confirmation of one action does not confirm another.
    response = select_all(admin_client, url, "delete_selected", confirm=fields)
    assert "Nothing was done" in messages_of(response)[0]
    assert not BulkAction.objects.exists() and Job.objects.get(pk=job.pk).status == JobStatus.PENDING


@pytest.mark.p1
def test_cancelling_any_number_goes_through_the_background_path(admin_client):
    """No size above which the console refuses: the old limit of 100,000 ids is gone."""
    running = running_job(queue="bulk")
    page = select_all(admin_client, JOBS + "?queue=bulk", "cancel_selected")
    select_all(admin_client, JOBS + "?queue=bulk", "cancel_selected", confirm=confirmation(page))
    run_to_the_end(BulkAction.objects.get(), 500)
    asked = Job.objects.get(pk=running.pk)
    assert asked.status == JobStatus.RUNNING and asked.cancel_requested_at is not None
    assert asked.cancelled_by.startswith("admin ")
    assert asked.cancel_requested_at <= timezone.now()
